// Package promkafka exports the Stats of a seqkafka Consumer to
// Prometheus, as package seqprom does the scheduler's: a [Collector] reads
// Consumer.Stats at each scrape.
//
//	c, err := promkafka.NewCollector(consumer) // a *seqkafka.Consumer
//	...
//	prometheus.MustRegister(c)
//
// It is a module of its own, so that a program that exports only the
// scheduler's figures (package seqprom) does not have franz-go in its module
// graph. It takes package seqprom's Options (WithNamespace,
// WithConstLabels). The metrics, in base units, each per assigned
// partition (labels topic and partition):
//
//	seqsched_kafka_processed_total      counter  records handled successfully
//	seqsched_kafka_retries_total        counter  failed attempts that were retried
//	seqsched_kafka_dead_lettered_total  counter  records that went through the dead-letter step
//	seqsched_kafka_skipped_total        counter  records skipped: the commit metadata said they were done
//	seqsched_kafka_buffered             gauge    records fetched and not done
//	seqsched_kafka_in_flight            gauge    of those, records in a handler call now
//	seqsched_kafka_lag                  gauge    records not known to be done: high watermark - watermark
//	seqsched_kafka_paused               gauge    1 while the partition takes no records, else 0
//
// and, over the consumer:
//
//	seqsched_kafka_commits_total                counter    offset commits that succeeded
//	seqsched_kafka_commit_errors_total          counter    offset commits that failed
//	seqsched_kafka_handler_duration_seconds     histogram  each handler call (each batch call, with NewBatchConsumer)
//	seqsched_kafka_queue_time_seconds           histogram  a record's fetch to the start of its first handler call
//
// The histograms' buckets are seqsched.HistogramBounds. A partition's
// series are there while it is assigned to the consumer; its counters
// cover every assignment of it to this consumer, so they only grow. See
// the kafka package's Stats for what each figure counts exactly.
//
// User code: the only call into code the collector is handed is the
// StatsReader's Stats, once per Collect, as in package seqprom: on a
// goroutine of its own, no lock held; a panic or runtime.Goexit there
// fails the scrape with an error saying so (with the panic's stack).
package promkafka

import (
	"errors"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/seqsched/seqsched/seqkafka"
	"github.com/seqsched/seqsched/seqprom"
	"github.com/seqsched/seqsched/seqprom/internal/contain"
)

// StatsReader is what a [Collector] reads: a *seqkafka.Consumer, or anything
// else with its Stats method.
type StatsReader interface {
	Stats() seqkafka.Stats
}

// ErrNilStats is returned by NewCollector when given no StatsReader.
var ErrNilStats = errors.New("promkafka: nil StatsReader")

// Collector is a prometheus.Collector of a seqkafka Consumer's Stats (see the
// package doc for the metrics). It reads Stats at each Collect and keeps
// nothing between scrapes. Safe for concurrent use.
type Collector struct {
	s                     StatsReader
	counters              [4]*prometheus.Desc
	gauges                [4]*prometheus.Desc
	commits, commitErrors *prometheus.Desc
	handler, queue        *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector of s's Stats. It returns [ErrNilStats]
// when s is nil, and prom's *OptionError (wrapping seqprom.ErrInvalidOption)
// for a bad option.
func NewCollector(s StatsReader, opts ...seqprom.Option) (*Collector, error) {
	if s == nil {
		return nil, ErrNilStats
	}
	n, err := seqprom.NewNamer(opts...)
	if err != nil {
		return nil, err
	}
	per := func(name, help string) *prometheus.Desc {
		return n.Desc("kafka_"+name, help, "topic", "partition")
	}
	return &Collector{
		s: s,
		counters: [...]*prometheus.Desc{
			per("processed_total", "Records handled successfully."),
			per("retries_total", "Failed attempts that were retried."),
			per("dead_lettered_total", "Records that went through the dead-letter step."),
			per("skipped_total", "Records skipped because the commit metadata said they were done."),
		},
		gauges: [...]*prometheus.Desc{
			per("buffered", "Records fetched and not done."),
			per("in_flight", "Of the records buffered, those in a handler call now."),
			per("lag", "Records not known to be done: the high watermark less the watermark a commit would carry."),
			per("paused", "1 while the partition takes no records (buffer full, or the consumer paused), else 0."),
		},
		commits:      n.Desc("kafka_commits_total", "Offset commits that succeeded."),
		commitErrors: n.Desc("kafka_commit_errors_total", "Offset commits that failed."),
		handler:      n.Desc("kafka_handler_duration_seconds", "Duration of each handler call (each batch call, with NewBatchConsumer)."),
		queue:        n.Desc("kafka_queue_time_seconds", "Time from a record's fetch to the start of its first handler call."),
	}, nil
}

// Describe sends the descriptors of every metric the collector reports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.counters {
		ch <- d
	}
	for _, d := range c.gauges {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{c.commits, c.commitErrors, c.handler, c.queue} {
		ch <- d
	}
}

// Collect reads Stats once and sends every metric. If Stats panics or
// calls runtime.Goexit, it sends one invalid metric carrying the error.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st, err := contain.Call("promkafka: Stats", c.s.Stats)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.handler, err)
		return
	}
	send := func(m prometheus.Metric, err error) {
		if err != nil {
			m = prometheus.NewInvalidMetric(prometheus.NewInvalidDesc(err), err)
		}
		ch <- m
	}
	for _, p := range st.Partitions {
		part := strconv.FormatInt(int64(p.Partition), 10)
		for i, v := range [...]uint64{p.Processed, p.Retries, p.DeadLettered, p.Skipped} {
			send(prometheus.NewConstMetric(c.counters[i], prometheus.CounterValue, float64(v), p.Topic, part))
		}
		for i, v := range [...]float64{float64(p.Buffered), float64(p.InFlight), float64(p.Lag), one(p.Paused)} {
			send(prometheus.NewConstMetric(c.gauges[i], prometheus.GaugeValue, v, p.Topic, part))
		}
	}
	send(prometheus.NewConstMetric(c.commits, prometheus.CounterValue, float64(st.Commits)))
	send(prometheus.NewConstMetric(c.commitErrors, prometheus.CounterValue, float64(st.CommitErrors)))
	send(seqprom.HistogramMetric(c.handler, st.HandlerTime))
	send(seqprom.HistogramMetric(c.queue, st.QueueTime))
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
