package seqprom

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/seqsched/seqsched"
)

// bounds are seqsched.HistogramBounds in seconds, Prometheus's le values.
var bounds = func() []float64 {
	b := seqsched.HistogramBounds()
	s := make([]float64, len(b))
	for i, d := range b {
		s[i] = d.Seconds()
	}
	return s
}()

// HistogramMetric returns h as a constant Prometheus histogram of desc, in
// seconds, with the given label values: one bucket per bound of
// [seqsched.HistogramBounds] (le="1e-06" ... le="60") plus +Inf, counted
// cumulatively as Prometheus expects; the count is the sum of h.Buckets. It is what the collectors of this
// module send for every seqsched.Histogram (the scheduler's, and the
// broker modules'), for a collector of your own.
func HistogramMetric(desc *prometheus.Desc, h seqsched.Histogram, labelValues ...string) (prometheus.Metric, error) {
	buckets := make(map[float64]uint64, len(bounds))
	var n uint64
	for i, le := range bounds {
		n += h.Buckets[i]
		buckets[le] = n
	}
	// +Inf counts every duration: the sum of Buckets, which is Count in
	// every snapshot, and never below the last bound's count.
	n += h.Buckets[seqsched.HistogramBuckets-1]
	return prometheus.NewConstHistogram(desc, n, h.Sum.Seconds(), buckets, labelValues...)
}
