// Package prompg exports the Stats of a seqpg Worker to Prometheus, as
// package seqprom does the scheduler's: a [Collector] reads Worker.Stats
// at each scrape.
//
//	c, err := prompg.NewCollector(worker) // a *seqpg.Worker
//	...
//	prometheus.MustRegister(c)
//
// It is a module of its own, so that a program that exports only the
// scheduler's figures (package seqprom) does not have pgx in its module
// graph. It takes package seqprom's Options (WithNamespace,
// WithConstLabels). The metrics of the worker, in base units:
//
//	seqsched_pg_claimed_total        counter  key leases taken
//	seqsched_pg_completed_total      counter  jobs whose completion committed
//	seqsched_pg_retried_total        counter  failed attempts that will be retried
//	seqsched_pg_dead_lettered_total  counter  jobs moved to the dead-letter table
//	seqsched_pg_halted_total         counter  keys halted by WithHaltOnError
//	seqsched_pg_lease_lost_total     counter  outcomes refused because the lease was lost
//	seqsched_pg_lease_expired_total  counter  keys given back as their lease expired locally between jobs
//	seqsched_pg_lease_expired_running_total
//	                                 counter  jobs rolled back as their lease expired locally while they ran
//	seqsched_pg_db_errors_total      counter  database errors logged and retried
//	seqsched_pg_leased               gauge    keys the worker holds a lease on now
//
// and, from the same snapshot, the metrics of package seqprom for the
// worker's in-process scheduler (Stats.Scheduler: seqsched_tasks_total,
// seqsched_sessions, seqsched_queued, ...), whose sessions are the keys the
// worker holds. A registry that also holds a seqprom Collector of another
// scheduler tells the two apart by WithConstLabels.
//
// See the seqpg package's Stats for what each figure counts exactly.
//
// User code: the only call into code the collector is handed is the
// StatsReader's Stats, once per Collect, as in package seqprom: on a
// goroutine of its own, no lock held; a panic or runtime.Goexit there
// fails the scrape with an error saying so (with the panic's stack).
package prompg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/seqsched/seqsched/seqprom"
	"github.com/seqsched/seqsched/seqprom/internal/contain"
)

// StatsReader is what a [Collector] reads: a *seqpg.Worker, or anything
// else with its Stats method.
type StatsReader interface {
	Stats() seqpg.Stats
}

// ErrNilStats is returned by NewCollector when given no StatsReader.
var ErrNilStats = errors.New("prompg: nil StatsReader")

// Collector is a prometheus.Collector of a seqpg Worker's Stats (see the
// package doc for the metrics). It reads Stats once at each Collect and
// keeps nothing between scrapes. Safe for concurrent use; register it once
// per worker and registry.
type Collector struct {
	s        StatsReader
	opts     []seqprom.Option
	counters [9]*prometheus.Desc
	leased   *prometheus.Desc
	sched    *seqprom.Collector // describes the scheduler's metrics
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector of s's Stats. It returns [ErrNilStats]
// when s is nil, and seqprom's *OptionError (wrapping
// seqprom.ErrInvalidOption) for a bad option.
func NewCollector(s StatsReader, opts ...seqprom.Option) (*Collector, error) {
	if s == nil {
		return nil, ErrNilStats
	}
	n, err := seqprom.NewNamer(opts...)
	if err != nil {
		return nil, err
	}
	sched, err := seqprom.NewCollector(schedulerStats{}, opts...)
	if err != nil {
		return nil, err
	}
	desc := func(name, help string) *prometheus.Desc { return n.Desc("pg_"+name, help) }
	return &Collector{
		s:    s,
		opts: opts,
		counters: [...]*prometheus.Desc{
			desc("claimed_total", "Key leases taken."),
			desc("completed_total", "Jobs whose completion committed."),
			desc("retried_total", "Failed attempts that will be retried."),
			desc("dead_lettered_total", "Jobs moved to the dead-letter table seqpg_dead."),
			desc("halted_total", "Keys halted by WithHaltOnError."),
			desc("lease_lost_total", "Outcomes refused because the worker's lease on the key was lost."),
			desc("lease_expired_total", "Keys given back because their lease expired locally unrenewed between two of their jobs."),
			desc("lease_expired_running_total", "Jobs whose transaction was rolled back because their lease expired locally unrenewed while their handler ran."),
			desc("db_errors_total", "Database errors logged and retried."),
		},
		leased: desc("leased", "Keys the worker holds a lease on now."),
		sched:  sched,
	}, nil
}

// Describe sends the descriptors of every metric the collector reports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.counters {
		ch <- d
	}
	ch <- c.leased
	c.sched.Describe(ch)
}

// Collect reads Stats once and sends every metric. If Stats panics or
// calls runtime.Goexit, it sends one invalid metric carrying the error.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st, err := contain.Call("prompg: Stats", c.s.Stats)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.leased, err)
		return
	}
	send := func(m prometheus.Metric, err error) {
		if err != nil {
			m = prometheus.NewInvalidMetric(prometheus.NewInvalidDesc(err), err)
		}
		ch <- m
	}
	for i, v := range [...]uint64{st.Claimed, st.Completed, st.Retried, st.DeadLettered, st.Halted,
		st.LeaseLost, st.LeaseExpired, st.LeaseExpiredRunning, st.DBErrors} {
		send(prometheus.NewConstMetric(c.counters[i], prometheus.CounterValue, float64(v)))
	}
	send(prometheus.NewConstMetric(c.leased, prometheus.GaugeValue, float64(st.Leased)))
	// The scheduler's metrics come from the same snapshot: a seqprom
	// Collector of that value, with the options NewCollector checked.
	sc, err := seqprom.NewCollector(schedulerStats(st.Scheduler), c.opts...)
	if err != nil {
		send(nil, err)
		return
	}
	sc.Collect(ch)
}

// schedulerStats is a seqprom.StatsReader of one snapshot.
type schedulerStats seqsched.Stats

func (s schedulerStats) Stats() seqsched.Stats { return seqsched.Stats(s) }
