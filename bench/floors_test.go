package bench_test

import (
	"runtime"
	"testing"

	"github.com/seqsched/seqsched/bench"
)

// The round-trip floors are what their names say: one allocation per round
// trip each, 24 bytes for floor-goroutine (the spawned goroutine's closure)
// and 128 bytes for floor-goroutine-alloc (the closure grown to a seqsched
// future's size), so that the ratio between them is the cost of the
// allocation's size alone. Counted, not timed: strict in every mode.
func TestRoundTripFloorsAllocateOnceAtTheirSize(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	for _, c := range []struct {
		name  string
		mk    func() bench.Impl
		bytes float64
	}{
		{"floor-goroutine", bench.NewFloorGoroutine, 24},
		{"floor-goroutine-alloc", bench.NewFloorGoroutineAlloc, 128},
	} {
		impl := c.mk()
		allocs, bytes := roundTripAllocs(impl, 10_000)
		impl.Close()
		t.Logf("%s: %.4f allocations, %.2f bytes per round trip", c.name, allocs, bytes)
		// The runtime's own allocations (a goroutine record when its free
		// list is empty) are a fraction of one per round trip.
		if allocs < 1 || allocs >= 1.05 || bytes < c.bytes || bytes >= c.bytes+8 {
			t.Errorf("%s: %.3f allocations and %.1f bytes per round trip; want 1 of %.0f", c.name, allocs, bytes, c.bytes)
		}
	}
}

// roundTripAllocs returns the heap allocations and bytes of n round trips
// through impl (the whole process), per round trip.
func roundTripAllocs(impl bench.Impl, n int) (allocs, bytes float64) {
	bench.RoundTrip(impl)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range n {
		bench.RoundTrip(impl)
	}
	runtime.ReadMemStats(&m1)
	return float64(m1.Mallocs-m0.Mallocs) / float64(n), float64(m1.TotalAlloc-m0.TotalAlloc) / float64(n)
}
