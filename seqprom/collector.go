package seqprom

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqprom/internal/contain"
)

// StatsReader is what a [Collector] reads: a *seqsched.Scheduler[K] of any
// key type K, or anything else with its Stats method.
type StatsReader interface {
	Stats() seqsched.Stats
}

// Collector is a prometheus.Collector of a scheduler's Stats (see the
// package doc for the metrics). It reads Stats at each Collect and keeps
// nothing between scrapes. Safe for concurrent use; register it once per
// scheduler and registry.
type Collector struct {
	s StatsReader

	tasks, wait, run, sessions, running, queued, yields, slow *prometheus.Desc
	paused, paced, halts                                      *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// Label values of the priority and outcome labels.
var (
	priorities = [...]string{"high", "normal"}
	outcomes   = [...]string{"succeeded", "failed", "panicked", "skipped", "discarded", "replaced"}
)

// NewCollector returns a Collector of s's Stats. It returns an error
// wrapping [ErrNilStats] when s is nil, and an [*OptionError] wrapping
// [ErrInvalidOption] for a bad option.
func NewCollector(s StatsReader, opts ...Option) (*Collector, error) {
	if s == nil {
		return nil, ErrNilStats
	}
	n, err := NewNamer(opts...)
	if err != nil {
		return nil, err
	}
	desc := n.Desc
	return &Collector{
		s: s,
		tasks: desc("tasks_total",
			"Tasks whose future resolved, by priority and by how they ended.", "priority", "outcome"),
		wait: desc("task_wait_seconds",
			"Queue wait of started tasks, from submit to start (recorded with seqsched.WithWaitHistogram).", "priority"),
		run: desc("task_run_seconds",
			"Run time of tasks, from fn's start to its return (recorded with seqsched.WithRunHistogram).", "priority"),
		sessions: desc("sessions", "Sessions with queued or running work."),
		running:  desc("running", "Sessions running a task now."),
		queued:   desc("queued", "Tasks waiting to start.", "priority"),
		yields:   desc("yields_total", "Times a session gave up its turn to another."),
		slow:     desc("slow_tasks_total", "Tasks that ran longer than seqsched.WithSlowTask's limit."),
		paused:   desc("paused", "Sessions paused (Pause, or a halt) with no task running."),
		paced:    desc("paced", "Sessions waiting for a token of their seqsched.WithRate bucket."),
		halts:    desc("halts_total", "Times a failed seqsched.HaltOnError task halted its session."),
	}, nil
}

// Describe sends the descriptors of every metric the collector reports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.tasks, c.wait, c.run, c.sessions, c.running, c.queued, c.yields, c.slow,
		c.paused, c.paced, c.halts} {
		ch <- d
	}
}

// Collect reads Stats once and sends every metric. If Stats panics or
// calls runtime.Goexit, it sends one invalid metric carrying the error
// (with the panic's stack), so that the scrape reports it.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st, err := contain.Call("seqprom: Stats", c.s.Stats)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.tasks, err)
		return
	}
	send := func(m prometheus.Metric, err error) {
		if err != nil {
			m = prometheus.NewInvalidMetric(prometheus.NewInvalidDesc(err), err)
		}
		ch <- m
	}
	for i, ps := range [...]*seqsched.PriorityStats{&st.High, &st.Normal} {
		p := priorities[i]
		o := ps.Outcomes
		for j, n := range [...]uint64{o.Succeeded, o.Failed, o.Panicked, o.Skipped, o.Discarded, o.Replaced} {
			send(prometheus.NewConstMetric(c.tasks, prometheus.CounterValue, float64(n), p, outcomes[j]))
		}
		send(HistogramMetric(c.wait, ps.WaitHistogram, p))
		send(HistogramMetric(c.run, ps.RunHistogram, p))
		send(prometheus.NewConstMetric(c.queued, prometheus.GaugeValue, float64(ps.Queued), p))
	}
	send(prometheus.NewConstMetric(c.sessions, prometheus.GaugeValue, float64(st.Sessions)))
	send(prometheus.NewConstMetric(c.running, prometheus.GaugeValue, float64(st.Running)))
	send(prometheus.NewConstMetric(c.yields, prometheus.CounterValue, float64(st.Yields)))
	send(prometheus.NewConstMetric(c.slow, prometheus.CounterValue, float64(st.SlowTasks)))
	send(prometheus.NewConstMetric(c.paused, prometheus.GaugeValue, float64(st.Paused)))
	send(prometheus.NewConstMetric(c.paced, prometheus.GaugeValue, float64(st.Paced)))
	send(prometheus.NewConstMetric(c.halts, prometheus.CounterValue, float64(st.Halts)))
}

// ErrNilStats is returned by NewCollector when given no StatsReader.
var ErrNilStats = errors.New("seqprom: nil StatsReader")
