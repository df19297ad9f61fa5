package bench_test

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seqsched/seqsched/bench"
)

// TestHistogramCost reports what WithWaitHistogram and WithRunHistogram
// cost per task in the stream workload (through a handle's Post): each
// variant against the scheduler without them, in interleaved repetitions,
// as the median difference in ns/task and the median ratio, in wall and in
// CPU time. It runs at GOMAXPROCS=1 first, where the producer and the
// worker take turns and a task's cost is the sum of both sides' work, then
// at GOMAXPROCS, where they overlap and the stream's speed also depends on
// which side keeps up (a worker that drains the queue retires the session
// and the next task starts a goroutine again). It reports and never fails:
// the options have no target, only a cost BENCHMARKS.md quotes. Skipped
// under -short (CI), where BenchmarkHistogram runs once.
func TestHistogramCost(t *testing.T) {
	if raceEnabled {
		t.Skip("measured without -race")
	}
	if testing.Short() {
		t.Skip("a measurement, not a check: run without -short")
	}
	const reps = 51
	procs := []int{1}
	if p := runtime.GOMAXPROCS(0); p > 1 {
		procs = append(procs, p)
	}
	_, cpuOK := processCPU()
	for _, p := range procs {
		prev := runtime.GOMAXPROCS(p)
		opts := HistogramOptions()
		off, offImpl := streamCPUTimer(func() bench.Impl { return bench.NewSeqschedHandlePostWith(opts[0].Opts...) })
		lines := []string{fmt.Sprintf("%-6s %12s %8s %16s %8s", "hist", "ns/task", "ratio", "cpu-ns/task", "ratio")}
		for _, h := range opts[1:] {
			on, onImpl := streamCPUTimer(func() bench.Impl { return bench.NewSeqschedHandlePostWith(h.Opts...) })
			wall, cpu := medianDelta(reps, on, off)
			onImpl.Close()
			line := fmt.Sprintf("%-6s %+12.1f %8.3f", h.Name, wall.delta, wall.ratio)
			if cpuOK {
				line += fmt.Sprintf(" %+16.1f %8.3f", cpu.delta, cpu.ratio)
			}
			lines = append(lines, line)
		}
		offImpl.Close()
		runtime.GOMAXPROCS(prev)
		t.Logf("GOMAXPROCS=%d: histogram cost per task over %d interleaved repetitions (medians of on - off and on / off):\n%s",
			p, reps, strings.Join(lines, "\n"))
	}
}

// streamCPUTimer is streamTimer timing both wall clock and process CPU
// time per task.
func streamCPUTimer(mk func() bench.Impl) (func() (wall, cpu float64), bench.Impl) {
	impl := mk()
	p, c := bench.NewProducer(impl), bench.NewCounter()
	return func() (float64, float64) {
		const ops = 10
		cpu0, _ := processCPU()
		start := time.Now()
		for range ops {
			bench.Stream(p, c, streamN)
		}
		wall := time.Since(start)
		cpu1, _ := processCPU()
		return float64(wall) / (ops * streamN), float64(cpu1-cpu0) / (ops * streamN)
	}, impl
}

type deltaRatio struct{ delta, ratio float64 }

// medianDelta runs a and b reps times, alternating which goes first, and
// returns, for wall and CPU time each, the medians of the per-repetition
// differences a-b (ns per task) and ratios a/b.
func medianDelta(reps int, a, b func() (wall, cpu float64)) (wall, cpu deltaRatio) {
	var ds, rs [2][]float64
	for i := range reps {
		var wa, ca, wb, cb float64
		if i%2 == 0 {
			wa, ca = a()
			wb, cb = b()
		} else {
			wb, cb = b()
			wa, ca = a()
		}
		for k, x := range [2][2]float64{{wa, wb}, {ca, cb}} {
			ds[k] = append(ds[k], x[0]-x[1])
			if x[1] > 0 {
				rs[k] = append(rs[k], x[0]/x[1])
			}
		}
	}
	med := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	return deltaRatio{med(ds[0]), med(rs[0])}, deltaRatio{med(ds[1]), med(rs[1])}
}
