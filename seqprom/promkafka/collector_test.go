package promkafka_test

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
	"github.com/seqsched/seqsched/seqkafka"
	"github.com/seqsched/seqsched/seqprom"
	"github.com/seqsched/seqsched/seqprom/promkafka"
)

// A *seqkafka.Consumer is what the collector reads.
var _ promkafka.StatsReader = (*seqkafka.Consumer)(nil)

type fixed seqkafka.Stats

func (f fixed) Stats() seqkafka.Stats { return seqkafka.Stats(f) }

func histogramOf(ds ...time.Duration) seqsched.Histogram {
	var r histogram.Recorder
	for _, d := range ds {
		r.Observe(d)
	}
	var h seqsched.Histogram
	h.Count, h.Sum, h.Buckets = r.Snapshot()
	return h
}

// stats is two partitions' figures, each distinct, so that a figure
// reported under the wrong name or partition shows.
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

func TestEveryFigureUnderItsNameAndPartition(t *testing.T) {
	c, err := promkafka.NewCollector(fixed(stats), seqprom.WithConstLabels(prometheus.Labels{"app": "billing"}))
	require.NoError(t, err)
	want := map[string]float64{
		"seqsched_kafka_commits_total{app=billing}":                            7,
		"seqsched_kafka_commit_errors_total{app=billing}":                      2,
		"seqsched_kafka_handler_duration_seconds_count{app=billing}":           3,
		"seqsched_kafka_handler_duration_seconds_sum{app=billing}":             0.700004,
		"seqsched_kafka_handler_duration_seconds_bucket{app=billing,le=2e-06}": 2,
		"seqsched_kafka_handler_duration_seconds_bucket{app=billing,le=1}":     1,
		"seqsched_kafka_queue_time_seconds_count{app=billing}":                 2,
		"seqsched_kafka_queue_time_seconds_sum{app=billing}":                   66,
		"seqsched_kafka_queue_time_seconds_bucket{app=billing,le=5}":           1,
		"seqsched_kafka_queue_time_seconds_bucket{app=billing,le=+Inf}":        1,
	}
	for _, m := range []struct {
		name   string
		p0, p1 float64
	}{
		{"processed_total", 1, 103}, {"retries_total", 2, 102}, {"dead_lettered_total", 3, 101},
		{"skipped_total", 4, 100}, {"buffered", 10, 12}, {"in_flight", 11, 13}, {"lag", 9, 0},
		{"paused", 1, 0},
	} {
		want["seqsched_kafka_"+m.name+"{app=billing,partition=0,topic=orders}"] = m.p0
		want["seqsched_kafka_"+m.name+"{app=billing,partition=1,topic=orders}"] = m.p1
	}
	assert.Equal(t, want, flatten(t, c))
}

func TestNamespaceAndBadOptions(t *testing.T) {
	c, err := promkafka.NewCollector(fixed(seqkafka.Stats{}), seqprom.WithNamespace("app"))
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{
		"app_seqsched_kafka_commits_total{}":                  0,
		"app_seqsched_kafka_commit_errors_total{}":            0,
		"app_seqsched_kafka_handler_duration_seconds_count{}": 0,
		"app_seqsched_kafka_handler_duration_seconds_sum{}":   0,
		"app_seqsched_kafka_queue_time_seconds_count{}":       0,
		"app_seqsched_kafka_queue_time_seconds_sum{}":         0,
	}, flatten(t, c), "no partition assigned, no per-partition series")

	_, err = promkafka.NewCollector(fixed(stats), seqprom.WithConstLabels(prometheus.Labels{"partition": "x"}))
	require.ErrorIs(t, err, seqprom.ErrInvalidOption)
	_, err = promkafka.NewCollector(nil)
	require.ErrorIs(t, err, promkafka.ErrNilStats)
}

type statsFunc func() seqkafka.Stats

func (f statsFunc) Stats() seqkafka.Stats { return f() }

// A Stats that panics fails the scrape with the panic's value and stack.
func TestStatsThatPanicsFailsTheScrape(t *testing.T) {
	c, err := promkafka.NewCollector(statsFunc(func() seqkafka.Stats { panic("broken") }))
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	_, err = reg.Gather()
	require.ErrorContains(t, err, "promkafka: Stats panicked: broken")
}

func TestMetricsLintClean(t *testing.T) {
	c, err := promkafka.NewCollector(fixed(stats))
	require.NoError(t, err)
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
}
