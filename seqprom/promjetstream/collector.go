// Package promjetstream exports the Stats of a seqjetstream
// Consumer to Prometheus, as package seqprom does the scheduler's: a
// [Collector] reads Consumer.Stats at each scrape.
//
//	c, err := promjetstream.NewCollector(consumer) // a *seqjetstream.Consumer
//	...
//	prometheus.MustRegister(c)
//
// It is a module of its own, so that a program that exports only the
// scheduler's figures (package seqprom) does not have nats.go in its module
// graph. It takes package seqprom's Options (WithNamespace,
// WithConstLabels). The metrics, in base units, each counter and gauge
// per JetStream consumer (labels stream and consumer: the consumers the
// Consumer was made with, a bounded set):
//
//	seqsched_jetstream_received_total                counter  deliveries taken from JetStream, redeliveries included
//	seqsched_jetstream_acked_total                   counter  messages acknowledged after their handler returned nil
//	seqsched_jetstream_duplicates_total              counter  redeliveries of a message held or resolved here, not handled again
//	seqsched_jetstream_retries_total                 counter  failed attempts retried in place
//	seqsched_jetstream_termed_total                  counter  messages terminated
//	seqsched_jetstream_dead_lettered_total           counter  of those, the ones the dead-letter function accepted
//	seqsched_jetstream_given_back_total              counter  messages given back (Nak) for redelivery
//	seqsched_jetstream_dropped_total                 counter  messages left unanswered for JetStream to redeliver
//	seqsched_jetstream_heartbeats_total              counter  InProgress signals sent for held messages
//	seqsched_jetstream_catch_ups_abandoned_total     counter  catch-ups given up for messages that never came
//	seqsched_jetstream_catch_ups_started_over_total  counter  catch-ups started over, in order, while a message was still out
//	seqsched_jetstream_in_flight                     gauge    messages running their handler, waiting to retry or being dead-lettered
//	seqsched_jetstream_buffered                      gauge    messages held: delivered, not yet answered
//	seqsched_jetstream_waiting                       gauge    of those, messages held back by a catch-up
//	seqsched_jetstream_remembered                    gauge    resolved messages remembered to recognise redeliveries
//	seqsched_jetstream_owned                         gauge    1 while this instance may handle the consumer's messages
//	seqsched_jetstream_catching_up                   gauge    1 while a pin taken over is catching up
//	seqsched_jetstream_assigned                      gauge    0 while WithBalance assigns the consumer to another instance
//
// and, over all its consumers, two histograms in the buckets of
// seqsched.HistogramBounds:
//
//	seqsched_jetstream_handler_duration_seconds  the duration of every handler attempt
//	seqsched_jetstream_queue_time_seconds        delivery to the start of a message's first attempt
//
// See the jetstream package's Stats for what each figure counts exactly.
//
// User code: the only call into code the collector is handed is the
// StatsReader's Stats, once per Collect, as in package seqprom: on a
// goroutine of its own, no lock held; a panic or runtime.Goexit there
// fails the scrape with an error saying so (with the panic's stack).
package promjetstream

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/seqsched/seqsched/seqjetstream"
	"github.com/seqsched/seqsched/seqprom"
	"github.com/seqsched/seqsched/seqprom/internal/contain"
)

// StatsReader is what a [Collector] reads: a *seqjetstream.Consumer, or
// anything else with its Stats method.
type StatsReader interface {
	Stats() seqjetstream.Stats
}

// ErrNilStats is returned by NewCollector when given no StatsReader.
var ErrNilStats = errors.New("promjetstream: nil StatsReader")

// Collector is a prometheus.Collector of a seqjetstream Consumer's Stats (see
// the package doc for the metrics). It reads Stats at each Collect and
// keeps nothing between scrapes. Safe for concurrent use.
type Collector struct {
	s        StatsReader
	counters [11]*prometheus.Desc
	gauges   [7]*prometheus.Desc
	handler  *prometheus.Desc
	queue    *prometheus.Desc
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
		return n.Desc("jetstream_"+name, help, "stream", "consumer")
	}
	return &Collector{
		s: s,
		counters: [...]*prometheus.Desc{
			per("received_total", "Deliveries taken from JetStream, redeliveries included."),
			per("acked_total", "Messages acknowledged after their handler returned nil."),
			per("duplicates_total", "Redeliveries of a message still held or already resolved here: not handled again."),
			per("retries_total", "Failed attempts retried in place."),
			per("termed_total", "Messages terminated after a terminal error or their last attempt."),
			per("dead_lettered_total", "Of the messages terminated, those the dead-letter function accepted."),
			per("given_back_total", "Messages given back (Nak) for redelivery."),
			per("dropped_total", "Messages left unanswered, for JetStream to redeliver."),
			per("heartbeats_total", "InProgress signals sent for held messages."),
			per("catch_ups_abandoned_total", "Catch-ups given up after waiting too long for messages that never came."),
			per("catch_ups_started_over_total", "Catch-ups started over, in order, after waiting their bound while a message was still out."),
		},
		gauges: [...]*prometheus.Desc{
			per("in_flight", "Messages running their handler, waiting to retry, or being dead-lettered."),
			per("buffered", "Messages held: delivered and not yet acked, terminated, given back or dropped."),
			per("waiting", "Of the messages held, those held back by a catch-up."),
			per("remembered", "Resolved messages remembered to recognise their redeliveries."),
			per("owned", "1 while this instance may handle the consumer's messages, else 0."),
			per("catching_up", "1 while this instance holds messages back after taking the pin over, else 0."),
			per("assigned", "0 while WithBalance assigns the consumer to another instance (this one does not pull from it), else 1."),
		},
		handler: n.Desc("jetstream_handler_duration_seconds", "Duration of every handler attempt."),
		queue:   n.Desc("jetstream_queue_time_seconds", "Time from a message's delivery to the start of its first attempt."),
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
	ch <- c.handler
	ch <- c.queue
}

// Collect reads Stats once and sends every metric. If Stats panics or
// calls runtime.Goexit, it sends one invalid metric carrying the error.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st, err := contain.Call("promjetstream: Stats", c.s.Stats)
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
	for _, cs := range st.Consumers {
		for i, v := range [...]uint64{cs.Received, cs.Acked, cs.Duplicates, cs.Retries, cs.Termed,
			cs.DeadLettered, cs.GivenBack, cs.Dropped, cs.Heartbeats, cs.CatchUpsAbandoned, cs.CatchUpsStartedOver} {
			send(prometheus.NewConstMetric(c.counters[i], prometheus.CounterValue, float64(v), cs.Stream, cs.Consumer))
		}
		for i, v := range [...]float64{float64(cs.InFlight), float64(cs.Buffered), float64(cs.Waiting),
			float64(cs.Remembered), one(cs.Owned), one(cs.CatchingUp), one(cs.Assigned)} {
			send(prometheus.NewConstMetric(c.gauges[i], prometheus.GaugeValue, v, cs.Stream, cs.Consumer))
		}
	}
	send(seqprom.HistogramMetric(c.handler, st.HandlerTime))
	send(seqprom.HistogramMetric(c.queue, st.QueueTime))
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
