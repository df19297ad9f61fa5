package bench

import (
	"context"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqsched/seqsched"
)

// Counter hands out a reusable task that marks itself finished, so that a
// workload can wait for all it submitted without a future per task.
type Counter struct {
	wg   sync.WaitGroup
	Task Task
}

// NewCounter returns a counter whose Task is a no-op that counts.
func NewCounter() *Counter {
	c := &Counter{}
	c.Task = func(context.Context) error { c.wg.Done(); return nil }
	return c
}

// Noop is a task that does nothing.
func Noop(context.Context) error { return nil }

// Stream submits n no-op tasks to one session from one producer and waits
// for all of them.
func Stream(p Producer, c *Counter, n int) {
	c.wg.Add(n)
	for range n {
		p.Go(0, c.Task, false)
	}
	p.Flush()
	c.wg.Wait()
}

// RoundTrip submits one no-op task to an idle session and waits for it.
func RoundTrip(impl Impl) { impl.Call(0, Noop) }

// Many submits tasks no-op tasks spread over sessions keys by one goroutine
// per producer (producer i takes tasks i, i+P, ... and task j goes to key
// j % sessions), and waits for all of them.
func Many(ps []Producer, c *Counter, sessions, tasks int) {
	c.wg.Add(tasks)
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := i; j < tasks; j += len(ps) {
				p.Go(j%sessions, c.Task, false)
			}
			p.Flush()
		}()
	}
	wg.Wait()
	c.wg.Wait()
}

// sink keeps Spin's result alive.
var sink atomic.Uint64

// Spin does iters rounds of integer mixing: real CPU work, no memory.
func Spin(iters int) {
	x := uint64(iters) | 1
	for range iters {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	sink.Add(x)
}

// SpinIters is how many Spin iterations take about d on this machine
// (calibrated once, fastest of several tries).
func SpinIters(d time.Duration) int {
	best := calibrate()
	return max(1, int(float64(d)/best))
}

var calibrate = sync.OnceValue(func() float64 {
	const n = 1 << 20
	best := math.Inf(1)
	for range 7 {
		t := time.Now()
		Spin(n)
		best = min(best, float64(time.Since(t))/n)
	}
	return best // ns per iteration
})

// CPU is the fairness workload: sessions sessions receive tasks tasks of
// iters Spin iterations each, spread by the producers, and each session's
// finishing time is recorded. It returns Jain's fairness index over the
// sessions' throughput (tasks per second until their last task finished).
type CPU struct {
	sessions, tasks, iters int
	wg                     sync.WaitGroup
	start                  time.Time
	last                   []time.Time
	per                    []Task
}

// NewCPU prepares the per-session tasks.
func NewCPU(sessions, tasks, iters int) *CPU {
	w := &CPU{sessions: sessions, tasks: tasks, iters: iters,
		last: make([]time.Time, sessions), per: make([]Task, sessions)}
	for k := range sessions {
		w.per[k] = func(context.Context) error {
			Spin(w.iters)
			w.last[k] = time.Now() // tasks of one key are ordered: no race
			w.wg.Done()
			return nil
		}
	}
	return w
}

// Run performs one round and returns Jain's index over per-session
// throughput.
func (w *CPU) Run(ps []Producer) float64 {
	w.wg.Add(w.tasks)
	w.start = time.Now()
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := i; j < w.tasks; j += len(ps) {
				k := j % w.sessions
				p.Go(k, w.per[k], false)
			}
			p.Flush()
		}()
	}
	wg.Wait()
	w.wg.Wait()
	xs := make([]float64, w.sessions)
	for k, t := range w.last {
		n := w.tasks / w.sessions
		if k < w.tasks%w.sessions {
			n++
		}
		xs[k] = float64(n) / t.Sub(w.start).Seconds()
	}
	return Jain(xs)
}

// Jain returns Jain's fairness index of xs: (Σx)² / (n·Σx²), 1 when all are
// equal, 1/n when one takes everything. It is 0 for no values.
func Jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// Busy spins for d of wall-clock time: a task of a known duration that
// keeps its core busy.
func Busy(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
	}
}

// MixedResult holds submit→start latencies of one Mixed run.
type MixedResult struct {
	High, Normal []time.Duration
}

// Mixed measures how long High tasks wait to start on a busy session. It
// queues queued Normal tasks of duration d on session 0, then for each of
// rounds rounds tops the queue back up to queued waiting tasks, submits 9
// Normal tasks and 1 High one (10% High), and waits until the High task has
// started before the next round. It waits for every task before returning.
func Mixed(impl Impl, queued, rounds int, d time.Duration) MixedResult {
	var (
		wg        sync.WaitGroup
		started   atomic.Int64
		submitted int64
		res       MixedResult
		highStart = make(chan time.Duration, 1)
	)
	res.Normal = make([]time.Duration, 0, queued+rounds*10)
	submit := func(high bool) {
		wg.Add(1)
		submitted++
		t0 := time.Now()
		if high {
			impl.Go(0, func(context.Context) error {
				lat := time.Since(t0)
				started.Add(1)
				highStart <- lat
				Busy(d)
				wg.Done()
				return nil
			}, true)
			return
		}
		impl.Go(0, func(context.Context) error {
			// Tasks of one session are ordered, so appending here is safe.
			res.Normal = append(res.Normal, time.Since(t0))
			started.Add(1)
			Busy(d)
			wg.Done()
			return nil
		}, false)
	}
	for range queued {
		submit(false)
	}
	for range rounds {
		for n := queued - int(submitted-started.Load()); n > 0; n-- {
			submit(false)
		}
		for range 9 {
			submit(false)
		}
		submit(true)
		res.High = append(res.High, <-highStart)
	}
	wg.Wait()
	return res
}

// Percentile returns the p-th percentile (0..100, nearest rank) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// IdleResult is what an implementation keeps after keys distinct keys each
// ran one task and went idle.
type IdleResult struct {
	HeapBytes  int64 // live heap after GC, above the baseline before New
	Goroutines int   // goroutines above the baseline
}

// Idle runs one no-op task on each of keys distinct sessions, waits for
// them, lets the implementation settle, and measures what it retains. It
// closes the implementation afterwards.
func Idle(mk Maker, keys int) IdleResult {
	base := runtime.NumGoroutine()
	heap0 := liveHeap()
	impl := mk.New()
	c := NewCounter()
	ps := []Producer{NewProducer(impl)}
	Many(ps, c, keys, keys)
	ps = nil
	g := Settle(base)
	r := IdleResult{HeapBytes: int64(liveHeap()) - int64(heap0), Goroutines: g}
	runtime.KeepAlive(impl)
	impl.Close()
	return r
}

func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Settle waits, up to a second, for goroutines that are finishing to be
// gone, and returns how many remain above base. It watches the count; it is
// a measurement, not a synchronisation.
func Settle(base int) int {
	n := runtime.NumGoroutine() - base
	for i, same := 0, 0; n > 0 && i < 1000 && same < 50; i++ {
		time.Sleep(time.Millisecond)
		m := runtime.NumGoroutine() - base
		if m == n {
			same++
		} else {
			same = 0
		}
		n = m
	}
	return max(n, 0)
}

// SchedulerOf returns the seqsched scheduler behind impl, if it is one.
func SchedulerOf(impl Impl) *seqsched.Scheduler[int] {
	switch i := impl.(type) {
	case *seqImpl:
		return i.s
	case *seqAwait:
		return i.s
	}
	return nil
}
