// Package otelkafka exports the Stats of a seqkafka Consumer to
// OpenTelemetry, as package seqotel does the scheduler's: counters
// and gauges as asynchronous instruments on a [metric.Meter], read from
// Consumer.Stats once per collection, and the handler and queue-time
// histograms as a [sdkmetric.Producer] that reports the consumer's bucket
// counts as they are. Nothing is observed per record. [Tracing], an
// interceptor for seqkafka.WithInterceptor, makes a span per handler call.
//
//	m, err := otelkafka.New(consumer) // a *seqkafka.Consumer
//	reader := sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithProducer(m))
//	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
//	reg, err := m.Register(provider.Meter(otelkafka.ScopeName))
//	defer reg.Unregister()
//
// It is a module of its own, so that a program that exports only the
// scheduler's figures (module otel) does not have franz-go in its module
// graph. It takes package seqotel's Options (WithAttributes). The
// instruments; the last column is the name OpenTelemetry's Prometheus
// exporter gives each, the one package promkafka uses. Per assigned
// partition (attributes topic and partition, an int):
//
//	seqsched.kafka.processed         counter               {record}     seqsched_kafka_processed_total
//	seqsched.kafka.retries           counter               {attempt}    seqsched_kafka_retries_total
//	seqsched.kafka.dead_lettered     counter               {record}     seqsched_kafka_dead_lettered_total
//	seqsched.kafka.skipped           counter               {record}     seqsched_kafka_skipped_total
//	seqsched.kafka.buffered          updowncounter         {record}     seqsched_kafka_buffered
//	seqsched.kafka.in_flight         updowncounter         {record}     seqsched_kafka_in_flight
//	seqsched.kafka.lag               updowncounter         {record}     seqsched_kafka_lag
//	seqsched.kafka.paused            updowncounter         {partition}  seqsched_kafka_paused
//
// and over the consumer:
//
//	seqsched.kafka.commits           counter               {commit}     seqsched_kafka_commits_total
//	seqsched.kafka.commit_errors     counter               {commit}     seqsched_kafka_commit_errors_total
//	seqsched.kafka.handler.duration  histogram (Producer)  s            seqsched_kafka_handler_duration_seconds
//	seqsched.kafka.queue_time        histogram (Producer)  s            seqsched_kafka_queue_time_seconds
//
// paused is 1 while the partition takes no records, else 0, so that its
// sum over partitions is the number paused. A partition's data points are
// there while it is assigned to the consumer; its counters cover every
// assignment of it to this consumer, so they only grow. The histograms'
// bounds are seqsched.HistogramBounds in seconds, their start time New's.
// See the kafka package's Stats for what each figure counts exactly.
//
// User code: the only call into code this package is handed is the
// StatsReader's Stats, once per collection in the callback and once per
// Produce, contained as in package seqotel: on a goroutine of its own, no
// lock held; a panic (with its stack) or runtime.Goexit there becomes the
// error the callback or Produce returns; one that does not return holds
// the collection up until its ctx ends, and no other call starts while it
// is stuck.
package otelkafka

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
	"github.com/seqsched/seqsched/seqkafka"
	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqotel/internal/contain"
	"github.com/seqsched/seqsched/seqotel/internal/observe"
)

// ScopeName is the instrumentation scope of the histograms Produce
// reports; name the Meter given to Register with it too.
const ScopeName = "github.com/seqsched/seqsched/seqotel/otelkafka"

// StatsReader is what [Metrics] reads: a *seqkafka.Consumer, or anything else
// with its Stats method.
type StatsReader interface {
	Stats() seqkafka.Stats
}

// ErrNilStats is returned by New when given no StatsReader.
var ErrNilStats = errors.New("otelkafka: nil StatsReader")

// Metrics exports one seqkafka Consumer's figures (see the package doc):
// Register puts its counters and gauges on a Meter, and it is the
// sdkmetric.Producer of its histograms. It keeps nothing between
// collections. Safe for concurrent use.
type Metrics struct {
	stats *contain.Reader[seqkafka.Stats] // the StatsReader's Stats, contained
	attrs []attribute.KeyValue            // WithAttributes's
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
		stats: contain.NewReader("otelkafka: Stats", s.Stats),
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
		counter("seqsched.kafka.processed", "{record}", "Records handled successfully."),
		counter("seqsched.kafka.retries", "{attempt}", "Failed attempts that were retried."),
		counter("seqsched.kafka.dead_lettered", "{record}", "Records that went through the dead-letter step."),
		counter("seqsched.kafka.skipped", "{record}", "Records skipped because the commit metadata said they were done."),
	}
	gauges := [...]metric.Int64ObservableUpDownCounter{
		gauge("seqsched.kafka.buffered", "{record}", "Records fetched and not done."),
		gauge("seqsched.kafka.in_flight", "{record}", "Of the records buffered, those in a handler call now."),
		gauge("seqsched.kafka.lag", "{record}", "Records not known to be done: the high watermark less the watermark a commit would carry."),
		gauge("seqsched.kafka.paused", "{partition}", "1 while the partition takes no records (buffer full, or the consumer paused), else 0."),
	}
	commits := counter("seqsched.kafka.commits", "{commit}", "Offset commits that succeeded.")
	commitErrors := counter("seqsched.kafka.commit_errors", "{commit}", "Offset commits that failed.")
	return in.Register(func(ctx context.Context, o metric.Observer) error {
		st, err := m.stats.Read(ctx)
		if err != nil {
			return err
		}
		for _, p := range st.Partitions {
			set := metric.WithAttributeSet(m.with(attribute.String("topic", p.Topic), attribute.Int("partition", int(p.Partition))))
			for i, v := range [...]uint64{p.Processed, p.Retries, p.DeadLettered, p.Skipped} {
				o.ObserveInt64(counters[i], int64(v), set)
			}
			for i, v := range [...]int64{int64(p.Buffered), int64(p.InFlight), p.Lag, observe.One(p.Paused)} {
				o.ObserveInt64(gauges[i], v, set)
			}
		}
		set := metric.WithAttributeSet(m.with())
		o.ObserveInt64(commits, int64(st.Commits), set)
		o.ObserveInt64(commitErrors, int64(st.CommitErrors), set)
		return nil
	})
}

// Produce reads Stats once and returns the handler and queue-time
// histograms, cumulative since New, in seconds, with the bounds of
// seqsched.HistogramBounds, under the scope [ScopeName]. It implements
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
			{Name: "seqsched.kafka.handler.duration", Unit: "s", Data: histogram(st.HandlerTime),
				Description: "Duration of each handler call (each batch call, with NewBatchConsumer)."},
			{Name: "seqsched.kafka.queue_time", Unit: "s", Data: histogram(st.QueueTime),
				Description: "Time from a record's fetch to the start of its first handler call."},
		},
	}}, nil
}
