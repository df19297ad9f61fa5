package histogram

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// Fine counts durations in buckets at most 12.5% wide, whose bounds
// include every bound of Bounds: one record answers both quantiles
// (within 12.5% above the true value) and the counts of Bounds' buckets,
// exactly. The scheduler records queue waits in one, for WaitStats and
// WaitHistogram alike. Make it with NewFine; it is safe for concurrent use.
type Fine struct {
	count   atomic.Uint64
	sum     atomic.Int64
	max     atomic.Int64
	buckets []atomic.Uint64 // one per bound of fineBounds, and one above the last
}

// fineBounds are Fine's bounds in ns: every integer up to 16, then, between
// consecutive points of 1, 2, 5 per decade and Bounds, geometric steps of
// at most 12% (floored to whole ns), up to 1e18 ns (31 years).
var fineBounds = func() []int64 {
	var bounds []int64
	for b := int64(1); b <= 16; b++ {
		bounds = append(bounds, b)
	}
	anchors := slices.Clone(Bounds[:])
	for p := int64(1); p <= 1e17; p *= 10 {
		anchors = append(anchors, p, 2*p, 5*p)
	}
	anchors = append(anchors, 1e18)
	slices.Sort(anchors)
	anchors = slices.Compact(anchors)
	for _, hi := range anchors {
		lo := bounds[len(bounds)-1]
		if hi <= lo {
			continue
		}
		n := int(math.Ceil(math.Log(float64(hi)/float64(lo)) / math.Log(1.12)))
		for i := 1; i < n; i++ {
			b := int64(float64(lo) * math.Pow(float64(hi)/float64(lo), float64(i)/float64(n)))
			if b > bounds[len(bounds)-1] && b < hi {
				bounds = append(bounds, b)
			}
		}
		bounds = append(bounds, hi)
	}
	return bounds
}()

// coarseOf maps each fine bucket to the bucket of Bounds it falls in.
var coarseOf = func() []int {
	m := make([]int, len(fineBounds)+1)
	for i, b := range fineBounds {
		m[i] = bucket(b)
	}
	m[len(fineBounds)] = Buckets - 1
	return m
}()

// NewFine returns an empty Fine.
func NewFine() *Fine {
	return &Fine{buckets: make([]atomic.Uint64, len(fineBounds)+1)}
}

// Observe counts d. A negative d counts as 0.
func (f *Fine) Observe(d time.Duration) {
	ns := max(int64(d), 0)
	i, _ := slices.BinarySearch(fineBounds, ns) // the first bound >= ns
	f.buckets[i].Add(1)
	f.count.Add(1)
	f.sum.Add(ns)
	for {
		m := f.max.Load()
		if ns <= m || f.max.CompareAndSwap(m, ns) {
			return
		}
	}
}

// FineSnapshot is what a Fine counted up to a moment.
type FineSnapshot struct {
	Count  uint64
	Sum    time.Duration
	Max    time.Duration
	counts []uint64
}

// Snapshot returns the counts so far. One taken while durations are
// recorded may miss those in flight; its Count is the sum of its buckets.
func (f *Fine) Snapshot() FineSnapshot {
	s := FineSnapshot{counts: make([]uint64, len(f.buckets)),
		Sum: time.Duration(f.sum.Load()), Max: time.Duration(f.max.Load())}
	for i := range f.buckets {
		s.counts[i] = f.buckets[i].Load()
		s.Count += s.counts[i]
	}
	return s
}

// Buckets returns the counts in the buckets of Bounds, as a Recorder's
// Snapshot does.
func (s FineSnapshot) Buckets() [Buckets]uint64 {
	var b [Buckets]uint64
	for i, c := range s.counts {
		b[coarseOf[i]] += c
	}
	return b
}

// Quantile returns the upper bound of the bucket that holds the q-th
// quantile (0 < q <= 1), at most 12.5% above the true value and never
// above Max; 0 when nothing was counted.
func (s FineSnapshot) Quantile(q float64) time.Duration {
	if s.Count == 0 {
		return 0
	}
	rank := max(uint64(q*float64(s.Count)+0.5), 1)
	var seen uint64
	for i, c := range s.counts {
		if seen += c; seen >= rank && i < len(fineBounds) {
			return min(time.Duration(fineBounds[i]), s.Max)
		}
	}
	return s.Max
}
