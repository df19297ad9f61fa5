package bench_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqsched/seqsched/bench"
)

// The round trip under CPU load: one CPU-bound goroutine per P runs while
// round trips are timed one by one. A waiter that blocks (a WaitGroup, a
// channel) hands its P to the goroutine it woke and gets it back when that
// one is done, so the CPU-bound goroutines cost the round trip little more
// than their share of the P; a waiter that spins with runtime.Gosched
// hands the P to a CPU-bound goroutine, which keeps it until the runtime
// preempts it (about 10 ms). Issue 47 rejected that fast path for Await
// because it pushes a round trip to ~20 ms; BenchmarkRoundTripCPULoad and
// TestTargets' "cpu load" rows are what would catch it, and FloorGosched,
// the goroutine floor with a Gosched wait, shows that they do.

// hogCPU starts one CPU-bound goroutine per P and returns a function that
// stops them and waits for them to end.
func hogCPU() (stop func()) {
	var quit atomic.Bool
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := uint64(1)
			for !quit.Load() {
				for range 1000 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			hogSink.Add(x)
		}()
	}
	return func() { quit.Store(true); wg.Wait() }
}

var hogSink atomic.Uint64

// loadedRoundTrips times round trips through impl one by one, at most n
// and for no longer than budget (a Gosched wait takes milliseconds each),
// and returns their latencies. The caller runs hogCPU around it.
func loadedRoundTrips(impl bench.Impl, n int, budget time.Duration) []time.Duration {
	lat := make([]time.Duration, 0, n)
	end := time.Now().Add(budget)
	for len(lat) < n {
		start := time.Now()
		bench.RoundTrip(impl)
		now := time.Now()
		lat = append(lat, now.Sub(start))
		if now.After(end) {
			break
		}
	}
	return lat
}

// cpuLoadImpls are the round trip's floors, its Gosched variant and
// seqsched's awaited round trips.
func cpuLoadImpls() []bench.Maker {
	return []bench.Maker{
		{Name: "floor-goroutine", New: bench.NewFloorGoroutine},
		{Name: "floor-goroutine-alloc", New: bench.NewFloorGoroutineAlloc},
		{Name: "floor-gosched", New: bench.NewFloorGosched},
		{Name: "seqsched-await", New: bench.NewSeqschedAwait},
		{Name: "seqsched-hgo", New: bench.NewSeqschedHandleGo},
	}
}

// BenchmarkRoundTripCPULoad is the round trip with a CPU-bound goroutine
// per P. An operation is up to 1,000 round trips timed one by one, for no
// longer than 20 ms (a Gosched wait takes milliseconds each, and at
// GOMAXPROCS above 1 it springs only now and then: an operation of a fixed
// count would make b.Loop's estimate of N from a lucky start run for
// hours). p50-ns and p99-ns are the round trips' latencies over the whole
// run, ns/roundtrip their mean. floor-gosched's p99 is the runtime's
// preemption quantum; seqsched's must stay near the floors'.
func BenchmarkRoundTripCPULoad(b *testing.B) {
	for _, mk := range cpuLoadImpls() {
		b.Run("impl="+mk.Name, func(b *testing.B) {
			impl := mk.New()
			defer impl.Close()
			bench.RoundTrip(impl)
			stop := hogCPU()
			defer stop()
			var lat []time.Duration
			for b.Loop() {
				lat = append(lat, loadedRoundTrips(impl, 1000, 20*time.Millisecond)...)
			}
			stop()
			var sum time.Duration
			for _, d := range lat {
				sum += d
			}
			b.ReportMetric(float64(sum.Nanoseconds())/float64(len(lat)), "ns/roundtrip")
			b.ReportMetric(float64(bench.Percentile(lat, 50).Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(bench.Percentile(lat, 99).Nanoseconds()), "p99-ns")
		})
	}
}
