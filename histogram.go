package seqsched

import (
	"sync/atomic"
	"time"
)

// HistogramBuckets is how many buckets a [Histogram] has: one per bound of
// [HistogramBounds], and one for durations above the last bound.
const HistogramBuckets = len(histogramBounds) + 1

// histogramBounds are the buckets' upper bounds in ns: 1, 2, 5 per decade
// from 1 µs to 20 s, then 30 s and 60 s, so that queue waits in the minutes'
// range still land in a bucket of their own scale rather than in +Inf.
var histogramBounds = [...]int64{
	1e3, 2e3, 5e3, // µs
	1e4, 2e4, 5e4,
	1e5, 2e5, 5e5,
	1e6, 2e6, 5e6, // ms
	1e7, 2e7, 5e7,
	1e8, 2e8, 5e8,
	1e9, 2e9, 5e9, // s
	1e10, 2e10, 3e10, 6e10,
}

// HistogramBounds returns the upper bounds, ascending, of the buckets of
// every [Histogram] the scheduler and its modules (kafka, jetstream) report:
// 1 µs to 60 s, 1-2-5 per decade. A bound belongs to its bucket: a duration
// d falls in the first bucket whose bound is ≥ d. The slice is a copy.
func HistogramBounds() []time.Duration {
	b := make([]time.Duration, len(histogramBounds))
	for i, ns := range histogramBounds {
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

// HistogramRecorder counts durations into a [Histogram]'s buckets. It is
// what the scheduler's Stats and the broker modules' Stats report from;
// exporters read snapshots, so recording costs no more than a few atomic
// adds. The zero value is ready to use, and it is safe for concurrent use.
// A snapshot taken while durations are recorded may miss those in flight,
// so Count may differ from the sum of Buckets by as much.
type HistogramRecorder struct {
	sum     atomic.Int64
	buckets [HistogramBuckets]atomic.Uint64
}

// Observe counts d. A negative d counts as 0.
func (r *HistogramRecorder) Observe(d time.Duration) {
	ns := max(int64(d), 0)
	r.buckets[histogramBucket(ns)].Add(1)
	r.sum.Add(ns)
}

// Snapshot returns the counts so far.
func (r *HistogramRecorder) Snapshot() Histogram {
	var h Histogram
	for i := range r.buckets {
		h.Buckets[i] = r.buckets[i].Load()
		h.Count += h.Buckets[i]
	}
	h.Sum = time.Duration(r.sum.Load())
	return h
}

// histogramBucket is the bucket of ns: the first bound ≥ ns, by binary
// search over the 25 bounds (five comparisons).
func histogramBucket(ns int64) int {
	lo, hi := 0, len(histogramBounds)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if histogramBounds[m] < ns {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
