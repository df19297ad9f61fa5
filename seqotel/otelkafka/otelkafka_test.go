package otelkafka_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/internal/histogram"
	"github.com/seqsched/seqsched/seqkafka"
	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqotel/internal/promtest"
	"github.com/seqsched/seqsched/seqotel/otelkafka"
)

// A *seqkafka.Consumer is what Metrics reads.
var _ otelkafka.StatsReader = (*seqkafka.Consumer)(nil)

type statsFunc func() seqkafka.Stats

func (f statsFunc) Stats() seqkafka.Stats { return f() }

func fixed(st seqkafka.Stats) statsFunc { return func() seqkafka.Stats { return st } }

func histogramOf(ds ...time.Duration) seqsched.Histogram {
	var r histogram.Recorder
	for _, d := range ds {
		r.Observe(d)
	}
	var h seqsched.Histogram
	h.Count, h.Sum, h.Buckets = r.Snapshot()
	return h
}

// stats is promkafka's: two partitions' figures, each distinct, so that a
// figure reported under the wrong name or partition shows.
var stats = seqkafka.Stats{
	Buffered: 22, InFlight: 24, Processed: 104, Commits: 7, CommitErrors: 2,
	HandlerTime: histogramOf(2*time.Microsecond, 2*time.Microsecond, 700*time.Millisecond),
	QueueTime:   histogramOf(5*time.Second, 61*time.Second),
	Partitions: []seqkafka.PartitionStats{
		{Topic: "orders", Partition: 0, Paused: true, Committed: 40, Watermark: 41, HighWatermark: 50, Lag: 9,
			Buffered: 10, InFlight: 11, Processed: 1, Retries: 2, DeadLettered: 3, Skipped: 4},
		{Topic: "orders", Partition: 1, Committed: -1, Watermark: -1, HighWatermark: -1,
			Buffered: 12, InFlight: 13, Processed: 103, Retries: 102, DeadLettered: 101, Skipped: 100},
	},
}

// newReader wires s's Metrics to a manual reader as a program wires them
// to a periodic one: the Producer on the reader, the instruments on a
// Meter of the reader's provider.
func newReader(t *testing.T, s otelkafka.StatsReader, opts ...seqotel.Option) *sdkmetric.ManualReader {
	t.Helper()
	m, err := otelkafka.New(s, opts...)
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(m))
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	reg, err := m.Register(provider.Meter(otelkafka.ScopeName))
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Unregister() })
	return reader
}

// collect returns every data point of a collection as "name{k=v,...}":
// sums by value; histograms as _count, _sum and their non-empty buckets
// as _bucket{le} (non-cumulative, as OpenTelemetry counts them).
func collect(t *testing.T, ctx context.Context, r *sdkmetric.ManualReader) (map[string]float64, error) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	err := r.Collect(ctx, &rm)
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, otelkafka.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			key := func(suffix string, set attribute.Set, extra ...string) string {
				var kv []string
				for _, a := range set.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.Emit())
				}
				return m.Name + suffix + "{" + strings.Join(append(kv, extra...), ",") + "}"
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key("", p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				require.Equal(t, "s", m.Unit, m.Name)
				require.Equal(t, metricdata.CumulativeTemporality, d.Temporality)
				for _, p := range d.DataPoints {
					out[key("_count", p.Attributes)] = float64(p.Count)
					out[key("_sum", p.Attributes)] = p.Sum
					require.Len(t, p.BucketCounts, len(p.Bounds)+1)
					for i, n := range p.BucketCounts {
						if n == 0 {
							continue
						}
						le := "+Inf"
						if i < len(p.Bounds) {
							le = strconv.FormatFloat(p.Bounds[i], 'g', -1, 64)
						}
						out[key("_bucket", p.Attributes, "le="+le)] = float64(n)
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out, err
}

// Every figure of fixed Stats, exactly, under its name and partition, and
// each duration in the bucket its bound says.
func TestEveryFigureUnderItsNameAndPartition(t *testing.T) {
	r := newReader(t, fixed(stats), seqotel.WithAttributes(attribute.String("app", "billing")))
	got, err := collect(t, context.Background(), r)
	require.NoError(t, err)
	want := map[string]float64{
		"seqsched.kafka.commits{app=billing}":                          7,
		"seqsched.kafka.commit_errors{app=billing}":                    2,
		"seqsched.kafka.handler.duration_count{app=billing}":           3,
		"seqsched.kafka.handler.duration_sum{app=billing}":             0.700004,
		"seqsched.kafka.handler.duration_bucket{app=billing,le=2e-06}": 2,
		"seqsched.kafka.handler.duration_bucket{app=billing,le=1}":     1,
		"seqsched.kafka.queue_time_count{app=billing}":                 2,
		"seqsched.kafka.queue_time_sum{app=billing}":                   66,
		"seqsched.kafka.queue_time_bucket{app=billing,le=5}":           1,
		"seqsched.kafka.queue_time_bucket{app=billing,le=+Inf}":        1,
	}
	for _, m := range []struct {
		name   string
		p0, p1 float64
	}{
		{"processed", 1, 103}, {"retries", 2, 102}, {"dead_lettered", 3, 101}, {"skipped", 4, 100},
		{"buffered", 10, 12}, {"in_flight", 11, 13}, {"lag", 9, 0}, {"paused", 1, 0},
	} {
		want["seqsched.kafka."+m.name+"{app=billing,partition=0,topic=orders}"] = m.p0
		want["seqsched.kafka."+m.name+"{app=billing,partition=1,topic=orders}"] = m.p1
	}
	assert.Equal(t, want, got)
}

// A partition's data points are there while it is assigned: after a
// revocation, the next collection has none of it.
func TestARevokedPartitionsDataPointsGo(t *testing.T) {
	st := stats
	r := newReader(t, statsFunc(func() seqkafka.Stats { return st })) // collections here are sequential
	got, err := collect(t, context.Background(), r)
	require.NoError(t, err)
	assert.Contains(t, got, "seqsched.kafka.processed{partition=1,topic=orders}")

	st.Partitions = st.Partitions[:1]
	got, err = collect(t, context.Background(), r)
	require.NoError(t, err)
	assert.Equal(t, 1.0, got["seqsched.kafka.processed{partition=0,topic=orders}"])
	for name := range got {
		assert.NotContains(t, name, "partition=1", "revoked")
	}
}

func TestNoPartitionAndBadOptions(t *testing.T) {
	got, err := collect(t, context.Background(), newReader(t, fixed(seqkafka.Stats{})))
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{
		"seqsched.kafka.commits{}":                0,
		"seqsched.kafka.commit_errors{}":          0,
		"seqsched.kafka.handler.duration_count{}": 0,
		"seqsched.kafka.handler.duration_sum{}":   0,
		"seqsched.kafka.queue_time_count{}":       0,
		"seqsched.kafka.queue_time_sum{}":         0,
	}, got, "no partition assigned, no per-partition data points")

	_, err = otelkafka.New(fixed(stats), seqotel.WithAttributes(attribute.String("partition", "x")))
	require.ErrorIs(t, err, seqotel.ErrInvalidOption)
	require.ErrorContains(t, err, `attribute "partition" is one the data points use`)
	_, err = otelkafka.New(nil)
	require.ErrorIs(t, err, otelkafka.ErrNilStats)
}

// A Stats that panics or calls runtime.Goexit fails the collection with
// an error saying so, and one that blocks fails it when its ctx ends;
// none crashes or hangs it, and the next collection calls Stats again.
func TestStatsThatPanicsGoexitsOrBlocksFailsTheCollectionOnly(t *testing.T) {
	for _, c := range []struct {
		name string
		fail func(gate <-chan struct{})
		want string
	}{
		{"panic", func(<-chan struct{}) { panic("stats broke") }, "otelkafka: Stats panicked: stats broke"},
		{"Goexit", func(<-chan struct{}) { runtime.Goexit() }, "otelkafka: Stats called runtime.Goexit"},
		{"block", func(gate <-chan struct{}) { <-gate }, "otelkafka: Stats has not returned: context deadline exceeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				gate := make(chan struct{})
				open := sync.OnceFunc(func() { close(gate) })
				t.Cleanup(open)
				calls := 0
				r := newReader(t, statsFunc(func() seqkafka.Stats {
					calls++ // collections here are sequential
					if calls == 1 {
						c.fail(gate)
					}
					return stats
				}))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := collect(t, ctx, r)
				require.ErrorContains(t, err, c.want)

				open()
				synctest.Wait() // a blocked call returns
				got, err := collect(t, context.Background(), r)
				require.NoError(t, err)
				assert.Equal(t, 7.0, got["seqsched.kafka.commits{}"])
			})
		})
	}
}

// The README's table of instruments is what the SDK reports and what
// OpenTelemetry's Prometheus exporter makes of it: promkafka's names,
// types and labels.
func TestPrometheusExporterGivesTheNamesTheREADMESays(t *testing.T) {
	m, err := otelkafka.New(fixed(stats), seqotel.WithAttributes(attribute.String("app", "billing")))
	require.NoError(t, err)
	promtest.Check(t, promtest.Table(t, "README.md"), m, otelkafka.ScopeName, "app")
}
