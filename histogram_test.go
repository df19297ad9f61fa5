package seqsched_test

import (
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
