package seqsched

import (
	"time"

	"github.com/seqsched/seqsched/internal/histogram"
)

// HistogramBuckets is how many buckets a [Histogram] has: one per bound of
// [HistogramBounds], and one for durations above the last bound.
const HistogramBuckets = histogram.Buckets

// HistogramBounds returns the upper bounds, ascending, of the buckets of
// every [Histogram] the scheduler and its modules (seqkafka, seqjetstream) report:
// 1 µs to 60 s, 1-2-5 per decade. A bound belongs to its bucket: a duration
// d falls in the first bucket whose bound is ≥ d. The slice is a copy.
func HistogramBounds() []time.Duration {
	b := make([]time.Duration, len(histogram.Bounds))
	for i, ns := range histogram.Bounds {
		b[i] = time.Duration(ns)
	}
	return b
}

// Histogram is a snapshot of durations counted in the fixed buckets of
// [HistogramBounds], the form a metrics system aggregates across instances
// (a Prometheus histogram, an OpenTelemetry explicit-bucket histogram).
// Buckets[i] counts the durations in bucket i only (not cumulative);
// Buckets[HistogramBuckets-1] counts those above every bound. Count is the
// sum of Buckets, Sum the sum of the durations.
type Histogram struct {
	Count   uint64
	Sum     time.Duration
	Buckets [HistogramBuckets]uint64
}

// histogramOf returns r's counts so far as a Histogram.
func histogramOf(r *histogram.Recorder) Histogram {
	var h Histogram
	h.Count, h.Sum, h.Buckets = r.Snapshot()
	return h
}
