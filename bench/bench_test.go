package bench_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/bench"
)

// The comparative suite. Every workload is a benchmark whose sub-benchmarks
// are named key=value so that benchstat can put implementations side by
// side: benchstat -col /impl results.txt. Each reports, per task: ns/task,
// tasks/s, allocs/task and B/task (all allocations of the process while the
// loop ran, consumers included), cpu-ns/task (the CPU time of the whole
// process, every goroutine and the GC, on Unix: steadier than ns/task on a
// shared machine, where waiting for a core inflates wall time), and
// goroutines: how many the implementation still holds once the work is
// done and it went idle.

// streamN is how many tasks one stream operation submits.
const streamN = 1000

func streamImpls() []bench.Maker {
	floors := []bench.Maker{
		{Name: "floor-chan", New: bench.NewFloorChan},
		{Name: "floor-chan-alloc", New: bench.NewFloorChanAlloc},
	}
	return append(append(floors, bench.Keyed()...), bench.V2()...)
}

func roundtripImpls() []bench.Maker {
	floors := []bench.Maker{
		{Name: "floor-goroutine", New: bench.NewFloorGoroutine},
		{Name: "floor-goroutine-alloc", New: bench.NewFloorGoroutineAlloc},
	}
	return append(append(floors, bench.Keyed()...), bench.V2()...)
}

// measure runs op in b.Loop and reports per-task figures; tasksPerOp is how
// many tasks one op runs. One untimed op first puts every implementation in
// its steady state (sessions, goroutines, pools and maps that it keeps
// exist), so that the few iterations of a slow op are not dominated by
// set-up. It reports the goroutines impl retains after the loop, relative
// to base, and closes impl.
func measure(b *testing.B, impl bench.Impl, base, tasksPerOp int, op func()) {
	b.Helper()
	op()
	b.ReportAllocs()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0, cpuOK := processCPU()
	ops := 0
	for b.Loop() {
		op()
		ops++
	}
	cpu1, _ := processCPU()
	runtime.ReadMemStats(&m1)
	tasks := float64(ops * tasksPerOp)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/tasks, "ns/task")
	if cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/tasks, "cpu-ns/task")
	}
	b.ReportMetric(tasks/b.Elapsed().Seconds(), "tasks/s")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/tasks, "allocs/task")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/tasks, "B/task")
	b.ReportMetric(float64(bench.Settle(base)), "goroutines")
	impl.Close()
}

func BenchmarkStream(b *testing.B) {
	for _, mk := range streamImpls() {
		b.Run(fmt.Sprintf("n=%d/impl=%s", streamN, mk.Name), func(b *testing.B) {
			base := runtime.NumGoroutine()
			impl := mk.New()
			p, c := bench.NewProducer(impl), bench.NewCounter()
			measure(b, impl, base, streamN, func() { bench.Stream(p, c, streamN) })
		})
	}
}

func BenchmarkRoundTrip(b *testing.B) {
	for _, mk := range roundtripImpls() {
		b.Run("impl="+mk.Name, func(b *testing.B) {
			base := runtime.NumGoroutine()
			impl := mk.New()
			measure(b, impl, base, 1, func() { bench.RoundTrip(impl) })
		})
	}
}

// HistogramOptions are the scheduler's histogram options, each off and on:
// what BenchmarkHistogram compares.
func HistogramOptions() []struct {
	Name string
	Opts []seqsched.Option
} {
	return []struct {
		Name string
		Opts []seqsched.Option
	}{
		{"off", nil},
		{"wait", []seqsched.Option{seqsched.WithWaitHistogram()}},
		{"run", []seqsched.Option{seqsched.WithRunHistogram()}},
		{"both", []seqsched.Option{seqsched.WithWaitHistogram(), seqsched.WithRunHistogram()}},
	}
}

// BenchmarkHistogram is the stream workload through a handle's Post with
// WithWaitHistogram and WithRunHistogram off and on: the difference in
// ns/task is what recording costs per task. Run it with -count 1 in a
// loop to interleave the variants (BENCHMARKS.md).
func BenchmarkHistogram(b *testing.B) {
	for _, h := range HistogramOptions() {
		b.Run(fmt.Sprintf("n=%d/hist=%s", streamN, h.Name), func(b *testing.B) {
			base := runtime.NumGoroutine()
			impl := bench.NewSeqschedHandlePostWith(h.Opts...)
			p, c := bench.NewProducer(impl), bench.NewCounter()
			measure(b, impl, base, streamN, func() { bench.Stream(p, c, streamN) })
		})
	}
}

// ManyProducers is 2 and GOMAXPROCS, once each when they are equal.
func ManyProducers() []int {
	if p := runtime.GOMAXPROCS(0); p != 2 {
		return []int{2, p}
	}
	return []int{2}
}

// ManyTasks is how many tasks one many operation submits: ten per session
// for 1,000 sessions, two per session for 100,000.
func ManyTasks(sessions int) int {
	if sessions >= 100_000 {
		return 2 * sessions
	}
	return 10 * sessions
}

func BenchmarkMany(b *testing.B) {
	for _, sessions := range []int{1_000, 100_000} {
		for _, np := range ManyProducers() {
			for _, mk := range append(bench.Keyed(), bench.V2()...) {
				name := fmt.Sprintf("sessions=%d/producers=%d/impl=%s", sessions, np, mk.Name)
				b.Run(name, func(b *testing.B) {
					base := runtime.NumGoroutine()
					impl := mk.New()
					ps := bench.NewProducers(impl, np)
					c, n := bench.NewCounter(), ManyTasks(sessions)
					measure(b, impl, base, n, func() { bench.Many(ps, c, sessions, n) })
				})
			}
		}
	}
}

// MixedTask is the duration of a mixed task, and MixedQueued the Normal
// tasks kept waiting ahead of every High one.
const (
	MixedTask   = 50 * time.Microsecond
	MixedQueued = 10_000
)

// MixedRounds is how many High tasks one mixed run measures. Without a
// priority lane every High task waits for the whole queue (about half a
// second here), so those implementations are probed 5 times.
func MixedRounds(impl bench.Impl) int {
	if impl.Priority() {
		return 200
	}
	return 5
}

func BenchmarkMixed(b *testing.B) {
	for _, mk := range bench.Keyed() {
		if mk.Name == "seqsched-await" {
			continue // the same scheduler; futures play no part in start latency
		}
		b.Run(fmt.Sprintf("queued=%d/task=%s/impl=%s", MixedQueued, MixedTask, mk.Name), func(b *testing.B) {
			impl := mk.New()
			defer impl.Close()
			var res bench.MixedResult
			for b.Loop() {
				r := bench.Mixed(impl, MixedQueued, MixedRounds(impl), MixedTask)
				res.High = append(res.High, r.High...)
				res.Normal = append(res.Normal, r.Normal...)
			}
			p99 := bench.Percentile(res.High, 99)
			b.ReportMetric(float64(bench.Percentile(res.High, 50).Nanoseconds()), "high-p50-ns")
			b.ReportMetric(float64(p99.Nanoseconds()), "high-p99-ns")
			b.ReportMetric(float64(bench.Percentile(res.Normal, 50).Nanoseconds()), "normal-p50-ns")
			b.ReportMetric(float64(bench.Percentile(res.Normal, 99).Nanoseconds()), "normal-p99-ns")
			b.ReportMetric(float64(p99)/float64(MixedTask), "high-p99/task")
		})
	}
}

// CPU workload shape: 100 sessions, 20,000 tasks of about 2 µs each.
const (
	CPUSessions = 100
	CPUTasks    = 20_000
	CPUWork     = 2 * time.Microsecond
)

func BenchmarkCPU(b *testing.B) {
	iters := bench.SpinIters(CPUWork)
	for _, np := range ManyProducers() {
		for _, mk := range bench.Keyed() {
			name := fmt.Sprintf("sessions=%d/work=%s/producers=%d/impl=%s", CPUSessions, CPUWork, np, mk.Name)
			b.Run(name, func(b *testing.B) {
				base := runtime.NumGoroutine()
				impl := mk.New()
				ps := bench.NewProducers(impl, np)
				w := bench.NewCPU(CPUSessions, CPUTasks, iters)
				var jain, runs float64
				measure(b, impl, base, CPUTasks, func() { jain += w.Run(ps); runs++ })
				b.ReportMetric(jain/runs, "jain")
			})
		}
	}
}

// IdleKeys is how many distinct keys the idle workload touches: 1,000,000,
// except for designs that keep per-key state forever, measured at 100,000
// (their retained heap grows linearly; see BENCHMARKS.md).
func IdleKeys(name string) int {
	switch name {
	case "naive-chan", "pond", "protoactor":
		return 100_000
	}
	return 1_000_000
}

func BenchmarkIdle(b *testing.B) {
	for _, mk := range bench.Keyed() {
		keys := IdleKeys(mk.Name)
		b.Run(fmt.Sprintf("keys=%d/impl=%s", keys, mk.Name), func(b *testing.B) {
			var r bench.IdleResult
			ops := 0
			for b.Loop() {
				r = bench.Idle(mk, keys)
				ops++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(ops*keys), "ns/task")
			b.ReportMetric(float64(r.HeapBytes)/(1<<20), "heap-MiB")
			b.ReportMetric(float64(r.HeapBytes)/float64(keys), "heap-B/key")
			b.ReportMetric(float64(r.Goroutines), "goroutines")
		})
	}
}
