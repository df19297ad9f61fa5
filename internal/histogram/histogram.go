// Package histogram counts durations in the fixed buckets that the
// scheduler and its broker modules report as a seqsched.Histogram. It is
// internal: users read snapshots through each module's Stats.
package histogram

import (
	"sync/atomic"
	"time"
)

// Buckets is how many buckets a Recorder has: one per bound of Bounds, and
// one for durations above the last bound.
const Buckets = len(Bounds) + 1

// Bounds are the buckets' upper bounds in ns: 1, 2, 5 per decade from 1 µs
// to 20 s, then 30 s and 60 s, so that queue waits in the minutes' range
// still land in a bucket of their own scale rather than in +Inf.
var Bounds = [...]int64{
	1e3, 2e3, 5e3, // µs
	1e4, 2e4, 5e4,
	1e5, 2e5, 5e5,
	1e6, 2e6, 5e6, // ms
	1e7, 2e7, 5e7,
	1e8, 2e8, 5e8,
	1e9, 2e9, 5e9, // s
	1e10, 2e10, 3e10, 6e10,
}

// Recorder counts durations into buckets. The zero value is ready to use,
// and it is safe for concurrent use. A snapshot taken while durations are
// recorded may miss those in flight.
type Recorder struct {
	sum     atomic.Int64
	buckets [Buckets]atomic.Uint64
}

// Observe counts d. A negative d counts as 0.
func (r *Recorder) Observe(d time.Duration) {
	ns := max(int64(d), 0)
	r.buckets[bucket(ns)].Add(1)
	r.sum.Add(ns)
}

// Snapshot returns the count, the sum and each bucket's count so far.
func (r *Recorder) Snapshot() (count uint64, sum time.Duration, buckets [Buckets]uint64) {
	for i := range r.buckets {
		buckets[i] = r.buckets[i].Load()
		count += buckets[i]
	}
	return count, time.Duration(r.sum.Load()), buckets
}

// bucket is the bucket of ns: the first bound ≥ ns, by binary search.
func bucket(ns int64) int {
	lo, hi := 0, len(Bounds)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if Bounds[m] < ns {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
