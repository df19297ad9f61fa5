package promjetstream_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/internal/histogram"
	"github.com/seqsched/seqsched/seqjetstream"
	"github.com/seqsched/seqsched/seqprom"
	"github.com/seqsched/seqsched/seqprom/promjetstream"
)

// A *seqjetstream.Consumer is what the collector reads.
var _ promjetstream.StatsReader = (*seqjetstream.Consumer)(nil)

type fixed seqjetstream.Stats

func (f fixed) Stats() seqjetstream.Stats { return seqjetstream.Stats(f) }

func histogramOf(ds ...time.Duration) seqsched.Histogram {
	var r histogram.Recorder
	for _, d := range ds {
		r.Observe(d)
	}
	var h seqsched.Histogram
	h.Count, h.Sum, h.Buckets = r.Snapshot()
	return h
}

// stats is two partitions' figures, each counter distinct, so that a
// figure reported under the wrong name or consumer shows.
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

// flatten gathers c and returns each sample as "name{label=value,...}":
// counters and gauges by value; histograms as _count, _sum, and their
// non-empty buckets, non-cumulative, as _bucket{le}.
func flatten(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := func(suffix string, extra ...string) string {
				return mf.GetName() + suffix + "{" + strings.Join(append(slices.Clone(labels), extra...), ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key("")] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[key("_count")] = float64(h.GetSampleCount())
				out[key("_sum")] = h.GetSampleSum()
				var below uint64
				for _, b := range h.GetBucket() {
					if n := b.GetCumulativeCount() - below; n > 0 {
						out[key("_bucket", "le="+strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))] = float64(n)
					}
					below = b.GetCumulativeCount()
				}
				if n := h.GetSampleCount() - below; n > 0 {
					out[key("_bucket", "le=+Inf")] = float64(n)
				}
			default:
				t.Fatalf("%s: unexpected type %v", mf.GetName(), mf.GetType())
			}
		}
	}
	return out
}

func TestEveryFigureUnderItsNameAndConsumer(t *testing.T) {
	c, err := promjetstream.NewCollector(fixed(stats), seqprom.WithConstLabels(prometheus.Labels{"app": "billing"}))
	require.NoError(t, err)
	want := map[string]float64{
		"seqsched_jetstream_handler_duration_seconds_count{app=billing}":           3,
		"seqsched_jetstream_handler_duration_seconds_sum{app=billing}":             120.003001,
		"seqsched_jetstream_handler_duration_seconds_bucket{app=billing,le=1e-06}": 1,
		"seqsched_jetstream_handler_duration_seconds_bucket{app=billing,le=0.005}": 1,
		"seqsched_jetstream_handler_duration_seconds_bucket{app=billing,le=+Inf}":  1,
		"seqsched_jetstream_queue_time_seconds_count{app=billing}":                 1,
		"seqsched_jetstream_queue_time_seconds_sum{app=billing}":                   40,
		"seqsched_jetstream_queue_time_seconds_bucket{app=billing,le=60}":          1,
	}
	for _, m := range []struct {
		name   string
		p0, p1 float64
	}{
		{"received_total", 1, 101}, {"acked_total", 2, 102}, {"duplicates_total", 3, 103},
		{"retries_total", 4, 104}, {"termed_total", 5, 105}, {"dead_lettered_total", 6, 106},
		{"given_back_total", 7, 107}, {"dropped_total", 8, 108}, {"heartbeats_total", 9, 109},
		{"catch_ups_abandoned_total", 14, 114}, {"catch_ups_started_over_total", 15, 115},
		{"in_flight", 10, 110}, {"buffered", 11, 111}, {"waiting", 12, 112}, {"remembered", 13, 113},
		{"owned", 1, 0}, {"catching_up", 1, 0}, {"assigned", 0, 1},
	} {
		want["seqsched_jetstream_"+m.name+"{app=billing,consumer=p0,stream=ORDERS}"] = m.p0
		want["seqsched_jetstream_"+m.name+"{app=billing,consumer=p1,stream=ORDERS}"] = m.p1
	}
	assert.Equal(t, want, flatten(t, c))
}

func TestNamespaceAndBadOptions(t *testing.T) {
	c, err := promjetstream.NewCollector(fixed(seqjetstream.Stats{}), seqprom.WithNamespace("app"))
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{
		"app_seqsched_jetstream_handler_duration_seconds_count{}": 0,
		"app_seqsched_jetstream_handler_duration_seconds_sum{}":   0,
		"app_seqsched_jetstream_queue_time_seconds_count{}":       0,
		"app_seqsched_jetstream_queue_time_seconds_sum{}":         0,
	}, flatten(t, c), "no consumer, no per-consumer series")

	_, err = promjetstream.NewCollector(fixed(stats), seqprom.WithConstLabels(prometheus.Labels{"stream": "x"}))
	require.ErrorIs(t, err, seqprom.ErrInvalidOption)
	_, err = promjetstream.NewCollector(nil)
	require.ErrorIs(t, err, promjetstream.ErrNilStats)
}

type statsFunc func() seqjetstream.Stats

func (f statsFunc) Stats() seqjetstream.Stats { return f() }

// A Stats that panics fails the scrape with the panic's value and stack.
func TestStatsThatPanicsFailsTheScrape(t *testing.T) {
	c, err := promjetstream.NewCollector(statsFunc(func() seqjetstream.Stats { panic("broken") }))
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	_, err = reg.Gather()
	require.ErrorContains(t, err, "promjetstream: Stats panicked: broken")
}

func TestMetricsLintClean(t *testing.T) {
	c, err := promjetstream.NewCollector(fixed(stats))
	require.NoError(t, err)
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
}
