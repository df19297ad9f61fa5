package histogram

import (
	"testing"
	"time"
)

func TestBucketBoundsBelongToTheirBucket(t *testing.T) {
	for i, b := range Bounds {
		if got := bucket(b); got != i {
			t.Errorf("bucket(%d) = %d; want %d", b, got, i)
		}
		if got := bucket(b + 1); got != i+1 {
			t.Errorf("bucket(%d) = %d; want %d", b+1, got, i+1)
		}
	}
}

func TestRecorderCountsAndSums(t *testing.T) {
	var r Recorder
	r.Observe(-time.Second) // counts as 0
	r.Observe(time.Microsecond)
	r.Observe(time.Hour)
	count, sum, buckets := r.Snapshot()
	if count != 3 || sum != time.Hour+time.Microsecond {
		t.Fatalf("count, sum = %d, %v; want 3, %v", count, sum, time.Hour+time.Microsecond)
	}
	if buckets[0] != 2 || buckets[Buckets-1] != 1 {
		t.Fatalf("buckets[0], buckets[last] = %d, %d; want 2, 1", buckets[0], buckets[Buckets-1])
	}
}
