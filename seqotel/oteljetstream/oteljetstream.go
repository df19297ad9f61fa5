// Package oteljetstream exports the Stats of a seqjetstream
// Consumer to OpenTelemetry, as package seqotel does the
// scheduler's: counters and gauges as asynchronous instruments on a
// [metric.Meter], read from Consumer.Stats once per collection, and the
// handler-duration and queue-time histograms as a [sdkmetric.Producer]
// that reports the consumer's bucket counts as they are. Nothing is
// observed per message. [Tracing], an interceptor for
// seqjetstream.WithInterceptor, makes a span per handler call.
//
//	m, err := oteljetstream.New(consumer) // a *seqjetstream.Consumer
//	reader := sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithProducer(m))
//	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
//	reg, err := m.Register(provider.Meter(oteljetstream.ScopeName))
//	defer reg.Unregister()
//
// It is a module of its own, so that a program that exports only the
// scheduler's figures (module otel) does not have nats.go in its module
// graph. It takes package seqotel's Options (WithAttributes). The
// instruments; the last column is the name OpenTelemetry's Prometheus
// exporter gives each, the one package promjetstream uses. Each counter
// and gauge per JetStream consumer (attributes stream and consumer: the
// consumers the Consumer was made with, a bounded set):
//
//	seqsched.jetstream.received                counter        {delivery}   seqsched_jetstream_received_total
//	seqsched.jetstream.acked                   counter        {message}    seqsched_jetstream_acked_total
//	seqsched.jetstream.duplicates              counter        {delivery}   seqsched_jetstream_duplicates_total
//	seqsched.jetstream.retries                 counter        {attempt}    seqsched_jetstream_retries_total
//	seqsched.jetstream.termed                  counter        {message}    seqsched_jetstream_termed_total
//	seqsched.jetstream.dead_lettered           counter        {message}    seqsched_jetstream_dead_lettered_total
//	seqsched.jetstream.given_back              counter        {message}    seqsched_jetstream_given_back_total
//	seqsched.jetstream.dropped                 counter        {message}    seqsched_jetstream_dropped_total
//	seqsched.jetstream.heartbeats              counter        {heartbeat}  seqsched_jetstream_heartbeats_total
//	seqsched.jetstream.catch_ups_abandoned     counter        {catch-up}   seqsched_jetstream_catch_ups_abandoned_total
//	seqsched.jetstream.catch_ups_started_over  counter        {catch-up}   seqsched_jetstream_catch_ups_started_over_total
//	seqsched.jetstream.in_flight               updowncounter  {message}    seqsched_jetstream_in_flight
//	seqsched.jetstream.buffered                updowncounter  {message}    seqsched_jetstream_buffered
//	seqsched.jetstream.waiting                 updowncounter  {message}    seqsched_jetstream_waiting
//	seqsched.jetstream.remembered              updowncounter  {message}    seqsched_jetstream_remembered
//	seqsched.jetstream.owned                   updowncounter  {consumer}   seqsched_jetstream_owned
//	seqsched.jetstream.catching_up             updowncounter  {consumer}   seqsched_jetstream_catching_up
//	seqsched.jetstream.assigned                updowncounter  {consumer}   seqsched_jetstream_assigned
//
// and over all its consumers:
//
//	seqsched.jetstream.handler.duration  histogram (Producer)  s            seqsched_jetstream_handler_duration_seconds
//	seqsched.jetstream.queue_time        histogram (Producer)  s            seqsched_jetstream_queue_time_seconds
//
// owned is 1 while this instance may handle the consumer's messages,
// catching_up 1 while a pin taken over is catching up, and assigned 0
// while WithBalance assigns the consumer to another instance (1
// otherwise), so that their sums over consumers count them. The histograms' bounds are
// seqsched.HistogramBounds in seconds, their start time New's. See the
// jetstream package's Stats for what each figure counts exactly.
//
// User code: the only call into code this package is handed is the
// StatsReader's Stats, once per collection in the callback and once per
// Produce, contained as in package seqotel: on a goroutine of its own, no
// lock held; a panic (with its stack) or runtime.Goexit there becomes the
// error the callback or Produce returns; one that does not return holds
// the collection up until its ctx ends, and no other call starts while it
// is stuck.
package oteljetstream

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqjetstream"
	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqotel/internal/contain"
	"github.com/seqsched/seqsched/seqotel/internal/observe"
)

// ScopeName is the instrumentation scope of the histograms Produce
// reports; name the Meter given to Register with it too.
const ScopeName = "github.com/seqsched/seqsched/seqotel/oteljetstream"

// StatsReader is what [Metrics] reads: a *seqjetstream.Consumer, or anything
// else with its Stats method.
type StatsReader interface {
	Stats() seqjetstream.Stats
}

// ErrNilStats is returned by New when given no StatsReader.
var ErrNilStats = errors.New("oteljetstream: nil StatsReader")

// Metrics exports one seqjetstream Consumer's figures (see the package doc):
// Register puts its counters and gauges on a Meter, and it is the
// sdkmetric.Producer of its histograms. It keeps nothing between
// collections. Safe for concurrent use.
type Metrics struct {
	stats *contain.Reader[seqjetstream.Stats] // the StatsReader's Stats, contained
	attrs []attribute.KeyValue                // WithAttributes's
	start time.Time
}

var _ sdkmetric.Producer = (*Metrics)(nil)

// New returns the Metrics of s. It returns [ErrNilStats] when s is nil,
// and package seqotel's *OptionError (wrapping seqotel.ErrInvalidOption) for a
// bad option.
func New(s StatsReader, opts ...seqotel.Option) (*Metrics, error) {
	if s == nil {
		return nil, ErrNilStats
	}
	attrs, err := seqotel.Attributes(opts...)
	if err != nil {
		return nil, err
	}
	return &Metrics{
		stats: contain.NewReader("oteljetstream: Stats", s.Stats),
		attrs: attrs,
		start: time.Now(),
	}, nil
}

// with returns the attributes of a data point: WithAttributes's, then kv.
func (m *Metrics) with(kv ...attribute.KeyValue) attribute.Set {
	return observe.Attributes(m.attrs, kv...)
}

// Register creates the counters and gauges on meter, as asynchronous
// instruments, and registers one callback that reads Stats once per
// collection and observes them all. Unregister the Registration to stop.
// If Stats panics or calls runtime.Goexit, or has not returned when the
// collection's ctx ends, the callback returns the error and observes
// nothing. Register returns the meter's error if an instrument or the
// callback cannot be made.
func (m *Metrics) Register(meter metric.Meter) (metric.Registration, error) {
	in := observe.On(meter)
	counter, gauge := in.Counter, in.Gauge
	counters := [...]metric.Int64ObservableCounter{
		counter("seqsched.jetstream.received", "{delivery}", "Deliveries taken from JetStream, redeliveries included."),
		counter("seqsched.jetstream.acked", "{message}", "Messages acknowledged after their handler returned nil."),
		counter("seqsched.jetstream.duplicates", "{delivery}", "Redeliveries of a message still held or already resolved here: not handled again."),
		counter("seqsched.jetstream.retries", "{attempt}", "Failed attempts retried in place."),
		counter("seqsched.jetstream.termed", "{message}", "Messages terminated after a terminal error or their last attempt."),
		counter("seqsched.jetstream.dead_lettered", "{message}", "Of the messages terminated, those the dead-letter function accepted."),
		counter("seqsched.jetstream.given_back", "{message}", "Messages given back (Nak) for redelivery."),
		counter("seqsched.jetstream.dropped", "{message}", "Messages left unanswered, for JetStream to redeliver."),
		counter("seqsched.jetstream.heartbeats", "{heartbeat}", "InProgress signals sent for held messages."),
		counter("seqsched.jetstream.catch_ups_abandoned", "{catch-up}", "Catch-ups given up after waiting too long for messages that never came."),
		counter("seqsched.jetstream.catch_ups_started_over", "{catch-up}", "Catch-ups started over, in order, after waiting their bound while a message was still out."),
	}
	gauges := [...]metric.Int64ObservableUpDownCounter{
		gauge("seqsched.jetstream.in_flight", "{message}", "Messages running their handler, waiting to retry, or being dead-lettered."),
		gauge("seqsched.jetstream.buffered", "{message}", "Messages held: delivered and not yet acked, terminated, given back or dropped."),
		gauge("seqsched.jetstream.waiting", "{message}", "Of the messages held, those held back by a catch-up."),
		gauge("seqsched.jetstream.remembered", "{message}", "Resolved messages remembered to recognise their redeliveries."),
		gauge("seqsched.jetstream.owned", "{consumer}", "1 while this instance may handle the consumer's messages, else 0."),
		gauge("seqsched.jetstream.catching_up", "{consumer}", "1 while this instance holds messages back after taking the pin over, else 0."),
		gauge("seqsched.jetstream.assigned", "{consumer}", "0 while WithBalance assigns the consumer to another instance (this one does not pull from it), else 1."),
	}
	return in.Register(func(ctx context.Context, o metric.Observer) error {
		st, err := m.stats.Read(ctx)
		if err != nil {
			return err
		}
		for _, cs := range st.Consumers {
			set := metric.WithAttributeSet(m.with(attribute.String("stream", cs.Stream), attribute.String("consumer", cs.Consumer)))
			for i, v := range [...]uint64{cs.Received, cs.Acked, cs.Duplicates, cs.Retries, cs.Termed,
				cs.DeadLettered, cs.GivenBack, cs.Dropped, cs.Heartbeats, cs.CatchUpsAbandoned, cs.CatchUpsStartedOver} {
				o.ObserveInt64(counters[i], int64(v), set)
			}
			for i, v := range [...]int64{int64(cs.InFlight), int64(cs.Buffered), int64(cs.Waiting),
				int64(cs.Remembered), observe.One(cs.Owned), observe.One(cs.CatchingUp), observe.One(cs.Assigned)} {
				o.ObserveInt64(gauges[i], v, set)
			}
		}
		return nil
	})
}

// Produce reads Stats once and returns the handler-duration and
// queue-time histograms, cumulative since New, in seconds, with the bounds
// of seqsched.HistogramBounds, under the scope [ScopeName]. It implements
// sdkmetric.Producer: pass m to the reader with sdkmetric.WithProducer.
// If Stats panics or calls runtime.Goexit, or has not returned when ctx
// ends, it returns the error.
func (m *Metrics) Produce(ctx context.Context) ([]metricdata.ScopeMetrics, error) {
	st, err := m.stats.Read(ctx)
	if err != nil {
		return nil, err
	}
	now, attrs := time.Now(), m.with()
	histogram := func(h seqsched.Histogram) metricdata.Histogram[float64] {
		return observe.Cumulative(seqotel.HistogramDataPoint(h, attrs, m.start, now))
	}
	return []metricdata.ScopeMetrics{{
		Scope: instrumentation.Scope{Name: ScopeName},
		Metrics: []metricdata.Metrics{
			{Name: "seqsched.jetstream.handler.duration", Unit: "s", Data: histogram(st.HandlerTime),
				Description: "Duration of each handler call (each attempt)."},
			{Name: "seqsched.jetstream.queue_time", Unit: "s", Data: histogram(st.QueueTime),
				Description: "Time from a message's delivery to the start of its first attempt."},
		},
	}}, nil
}
