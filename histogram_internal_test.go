package seqsched

import (
	"testing"
	"time"
)

func TestHistogramBucketsCoverEveryValue(t *testing.T) {
	prev := -1
	for _, ns := range []int64{0, 1, 7, 8, 9, 15, 16, 17, 100, 1000, 1 << 20, 1<<40 + 12345, 1<<62 + 1} {
		b := bucket(ns)
		if b < prev {
			t.Fatalf("bucket(%d) = %d; want >= %d (monotonic)", ns, b, prev)
		}
		prev = b
		if up := upper(b); up < ns {
			t.Fatalf("upper(bucket(%d)) = %d; want >= %d", ns, up, ns)
		}
		if ns >= 8 {
			if up := upper(b); float64(up-ns) > float64(ns)/histSub {
				t.Fatalf("upper(bucket(%d)) = %d: more than 1/%d above", ns, up, histSub)
			}
		}
		if b > 0 && upper(b-1) >= ns {
			t.Fatalf("upper(bucket(%d)-1) = %d; want < %d", ns, upper(b-1), ns)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	w := h.snapshot()
	if w.Count != 1000 || w.Max != time.Millisecond {
		t.Fatalf("count, max = %d, %v; want 1000, 1ms", w.Count, w.Max)
	}
	within := func(name string, got, want time.Duration) {
		if got < want || float64(got-want) > float64(want)/histSub {
			t.Errorf("%s = %v; want %v..%v", name, got, want, want+want/histSub)
		}
	}
	within("p50", w.P50, 500*time.Microsecond)
	within("p99", w.P99, 990*time.Microsecond)
}
