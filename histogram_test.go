package seqsched_test

import (
	"sync"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
)

func TestHistogramBoundsCoverMicrosecondToMinute(t *testing.T) {
	b := seqsched.HistogramBounds()
	if len(b) != seqsched.HistogramBuckets-1 {
		t.Fatalf("len(bounds) = %d; want HistogramBuckets-1 = %d", len(b), seqsched.HistogramBuckets-1)
	}
	if b[0] != time.Microsecond || b[len(b)-1] != time.Minute {
		t.Fatalf("bounds run %v..%v; want 1µs..1m0s", b[0], b[len(b)-1])
	}
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] {
			t.Fatalf("bounds[%d] = %v <= bounds[%d] = %v; want ascending", i, b[i], i-1, b[i-1])
		}
	}
	b[0] = 0 // a copy: the next call is unchanged
	if seqsched.HistogramBounds()[0] != time.Microsecond {
		t.Fatal("HistogramBounds returned the package's own slice")
	}
}

func TestHistogramRecorderPlacesEachDurationInItsBucket(t *testing.T) {
	bounds := seqsched.HistogramBounds()
	var r seqsched.HistogramRecorder
	want := seqsched.Histogram{}
	observe := func(d time.Duration, bucket int) {
		t.Helper()
		r.Observe(d)
		want.Buckets[bucket]++
		want.Count++
		want.Sum += max(d, 0)
	}
	observe(-time.Second, 0) // counts as 0
	observe(0, 0)
	for i, b := range bounds {
		observe(b, i)     // a bound belongs to its own bucket
		observe(b+1, i+1) // one ns above goes to the next
	}
	observe(time.Hour, seqsched.HistogramBuckets-1)
	if got := r.Snapshot(); got != want {
		t.Fatalf("snapshot = %+v\nwant       %+v", got, want)
	}
}

func TestHistogramRecorderIsSafeForConcurrentUse(t *testing.T) {
	var r seqsched.HistogramRecorder
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for range 1000 {
				r.Observe(time.Duration(g) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	h := r.Snapshot()
	if h.Count != 4000 || h.Sum != 6000*time.Millisecond {
		t.Fatalf("count, sum = %d, %v; want 4000, 6s", h.Count, h.Sum)
	}
}
