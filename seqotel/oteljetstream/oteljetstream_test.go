package oteljetstream_test

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
	"github.com/seqsched/seqsched/seqjetstream"
	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqotel/internal/promtest"
	"github.com/seqsched/seqsched/seqotel/oteljetstream"
)

// A *seqjetstream.Consumer is what Metrics reads.
var _ oteljetstream.StatsReader = (*seqjetstream.Consumer)(nil)

type statsFunc func() seqjetstream.Stats

func (f statsFunc) Stats() seqjetstream.Stats { return f() }

func fixed(st seqjetstream.Stats) statsFunc { return func() seqjetstream.Stats { return st } }

func histogramOf(ds ...time.Duration) seqsched.Histogram {
	var r histogram.Recorder
	for _, d := range ds {
		r.Observe(d)
	}
	var h seqsched.Histogram
	h.Count, h.Sum, h.Buckets = r.Snapshot()
	return h
}

// stats is promjetstream's: two consumers' figures, each counter
// distinct, so that a figure reported under the wrong name or consumer
// shows.
var stats = seqjetstream.Stats{
	HandlerTime: histogramOf(time.Microsecond, 3*time.Millisecond, 2*time.Minute),
	QueueTime:   histogramOf(40 * time.Second),
	Consumers: []seqjetstream.ConsumerStats{
		{Stream: "ORDERS", Consumer: "p0", Pinned: true, Owned: true, CatchingUp: true,
			Received: 1, Acked: 2, Duplicates: 3, Retries: 4, Termed: 5, DeadLettered: 6, GivenBack: 7, Dropped: 8, Heartbeats: 9,
			CatchUpsAbandoned: 14, CatchUpsStartedOver: 15, InFlight: 10, Buffered: 11, Waiting: 12, Remembered: 13},
		{Stream: "ORDERS", Consumer: "p1", Pinned: true, Assigned: true,
			Received: 101, Acked: 102, Duplicates: 103, Retries: 104, Termed: 105, DeadLettered: 106, GivenBack: 107, Dropped: 108, Heartbeats: 109,
			CatchUpsAbandoned: 114, CatchUpsStartedOver: 115, InFlight: 110, Buffered: 111, Waiting: 112, Remembered: 113},
	},
}

// newReader wires s's Metrics to a manual reader as a program wires them
// to a periodic one: the Producer on the reader, the instruments on a
// Meter of the reader's provider.
func newReader(t *testing.T, s oteljetstream.StatsReader, opts ...seqotel.Option) *sdkmetric.ManualReader {
	t.Helper()
	m, err := oteljetstream.New(s, opts...)
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(m))
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	reg, err := m.Register(provider.Meter(oteljetstream.ScopeName))
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
		require.Equal(t, oteljetstream.ScopeName, sm.Scope.Name)
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

// Every figure of fixed Stats, exactly, under its name and consumer, and
// each duration in the bucket its bound says.
func TestEveryFigureUnderItsNameAndConsumer(t *testing.T) {
	r := newReader(t, fixed(stats), seqotel.WithAttributes(attribute.String("app", "billing")))
	got, err := collect(t, context.Background(), r)
	require.NoError(t, err)
	want := map[string]float64{
		"seqsched.jetstream.handler.duration_count{app=billing}":           3,
		"seqsched.jetstream.handler.duration_sum{app=billing}":             120.003001,
		"seqsched.jetstream.handler.duration_bucket{app=billing,le=1e-06}": 1,
		"seqsched.jetstream.handler.duration_bucket{app=billing,le=0.005}": 1,
		"seqsched.jetstream.handler.duration_bucket{app=billing,le=+Inf}":  1,
		"seqsched.jetstream.queue_time_count{app=billing}":                 1,
		"seqsched.jetstream.queue_time_sum{app=billing}":                   40,
		"seqsched.jetstream.queue_time_bucket{app=billing,le=60}":          1,
	}
	for _, m := range []struct {
		name   string
		p0, p1 float64
	}{
		{"received", 1, 101}, {"acked", 2, 102}, {"duplicates", 3, 103},
		{"retries", 4, 104}, {"termed", 5, 105}, {"dead_lettered", 6, 106},
		{"given_back", 7, 107}, {"dropped", 8, 108}, {"heartbeats", 9, 109},
		{"catch_ups_abandoned", 14, 114}, {"catch_ups_started_over", 15, 115},
		{"in_flight", 10, 110}, {"buffered", 11, 111}, {"waiting", 12, 112}, {"remembered", 13, 113},
		{"owned", 1, 0}, {"catching_up", 1, 0}, {"assigned", 0, 1},
	} {
		want["seqsched.jetstream."+m.name+"{app=billing,consumer=p0,stream=ORDERS}"] = m.p0
		want["seqsched.jetstream."+m.name+"{app=billing,consumer=p1,stream=ORDERS}"] = m.p1
	}
	assert.Equal(t, want, got)
}

func TestNoConsumerAndBadOptions(t *testing.T) {
	got, err := collect(t, context.Background(), newReader(t, fixed(seqjetstream.Stats{})))
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{
		"seqsched.jetstream.handler.duration_count{}": 0,
		"seqsched.jetstream.handler.duration_sum{}":   0,
		"seqsched.jetstream.queue_time_count{}":       0,
		"seqsched.jetstream.queue_time_sum{}":         0,
	}, got, "no consumer, no per-consumer data points")

	_, err = oteljetstream.New(fixed(stats), seqotel.WithAttributes(attribute.String("stream", "x")))
	require.ErrorIs(t, err, seqotel.ErrInvalidOption)
	require.ErrorContains(t, err, `attribute "stream" is one the data points use`)
	_, err = oteljetstream.New(nil)
	require.ErrorIs(t, err, oteljetstream.ErrNilStats)
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
		{"panic", func(<-chan struct{}) { panic("stats broke") }, "oteljetstream: Stats panicked: stats broke"},
		{"Goexit", func(<-chan struct{}) { runtime.Goexit() }, "oteljetstream: Stats called runtime.Goexit"},
		{"block", func(gate <-chan struct{}) { <-gate }, "oteljetstream: Stats has not returned: context deadline exceeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				gate := make(chan struct{})
				open := sync.OnceFunc(func() { close(gate) })
				t.Cleanup(open)
				calls := 0
				r := newReader(t, statsFunc(func() seqjetstream.Stats {
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
				assert.Equal(t, 2.0, got["seqsched.jetstream.acked{consumer=p0,stream=ORDERS}"])
			})
		})
	}
}

// The README's table of instruments is what the SDK reports and what
// OpenTelemetry's Prometheus exporter makes of it: promjetstream's names,
// types and labels.
func TestPrometheusExporterGivesTheNamesTheREADMESays(t *testing.T) {
	m, err := oteljetstream.New(fixed(stats), seqotel.WithAttributes(attribute.String("app", "billing")))
	require.NoError(t, err)
	promtest.Check(t, promtest.Table(t, "README.md"), m, oteljetstream.ScopeName, "app")
}
