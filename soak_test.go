package seqsched_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var soakFor = flag.Duration("soak", 0,
	"TestSoak: how long to run (0: 60s); for a long soak use e.g. -soak=10m -timeout=0")

const (
	soakProducers = 8
	soakSessions  = 10_000
	soakHot       = 100 // half the tasks go to these keys, so sessions build queues and yield
)

// soakPhase is one scheduler's life in the soak: its options and its tallies.
type soakPhase struct {
	maxConc, yieldAfter int
	elapsed             time.Duration
	peak                int64 // most tasks seen running at once

	accepted, ok, panicked, canceled uint64 // canceled: skipped, never ran
	closing                          uint64 // Submits refused while the key was being removed
	removes                          uint64
}

// soakTask is one task's expectations, checked when its future resolves.
type soakTask struct {
	f        *seqsched.Future[uint64]
	token    uint64
	panics   bool
	canceled bool // its submit ctx was canceled before Submit: it must never run
	ran      atomic.Int32
}

// soakKey is the state of one key; only that key's tasks touch it, one at a
// time, so it needs no lock (the race detector checks that claim).
type soakKey struct {
	running atomic.Int32 // >1 means two tasks of the key overlap
	last    [soakProducers][2]uint64
}

// TestSoak runs 8 producers against 10,000 sessions for 60 s (see -soak),
// in phases, each on a new scheduler with a random WithMaxConcurrency and
// WithYieldAfter: random priorities, 1% panics, 1% canceled submissions and
// periodic Removes. It checks, as it goes, that tasks of a key never overlap
// and start in each producer's order within a priority, and that no more
// than the limit run at once; at the end of a phase that every accepted
// future resolved exactly once with the outcome its task explains and the
// Stats agree; at the end that goroutines and heap are back at baseline.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test skipped in -short mode")
	}
	total := *soakFor
	if total == 0 {
		total = time.Minute
	}
	phaseLen := min(total, 10*time.Second)
	ignore := goleak.IgnoreCurrent()
	goroutinesBefore := runtime.NumGoroutine()
	heapBefore := liveHeap()

	var phases []soakPhase
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for start := time.Now(); time.Since(start) < total; {
		limits := []int{1, 4, 16, 64, 256}
		if !raceEnabled {
			limits = append(limits, 0)
		}
		p := soakPhase{maxConc: limits[rng.IntN(len(limits))], yieldAfter: 10 + rng.IntN(41)}
		runSoakPhase(t, &p, min(phaseLen, total-time.Since(start)), rng.Uint64())
		phases = append(phases, p)
		if t.Failed() {
			return
		}
	}

	var sum soakPhase
	for i, p := range phases {
		t.Logf("phase %d: WithMaxConcurrency(%d) WithYieldAfter(%d): %d tasks in %v (%.0f tasks/s), peak %d running; "+
			"ok %d, panicked %d, canceled %d, refused while closing %d, removes %d",
			i, p.maxConc, p.yieldAfter, p.accepted, p.elapsed.Round(time.Millisecond),
			float64(p.accepted)/p.elapsed.Seconds(), p.peak, p.ok, p.panicked, p.canceled, p.closing, p.removes)
		sum.accepted += p.accepted
		sum.ok += p.ok
		sum.panicked += p.panicked
		sum.canceled += p.canceled
		sum.closing += p.closing
		sum.removes += p.removes
		sum.elapsed += p.elapsed
	}
	goleak.VerifyNone(t, ignore)
	goroutinesAfter := runtime.NumGoroutine()
	heapAfter := liveHeap()
	t.Logf("total: %d tasks in %v (%.0f tasks/s, race detector: %v); ok %d, panicked %d, canceled %d, "+
		"refused while closing %d, removes %d",
		sum.accepted, sum.elapsed.Round(time.Millisecond), float64(sum.accepted)/sum.elapsed.Seconds(), raceEnabled,
		sum.ok, sum.panicked, sum.canceled, sum.closing, sum.removes)
	t.Logf("goroutines before %d, after %d; live heap before %d KiB, after %d KiB",
		goroutinesBefore, goroutinesAfter, heapBefore>>10, heapAfter>>10)
	// Every scheduler is gone: what is left must be noise, not tasks or sessions.
	require.Less(t, heapAfter, heapBefore+1<<20, "live heap must return near its baseline")
}

// liveHeap returns the bytes of live heap after garbage collection (twice,
// so that sync.Pool's victim cache is emptied too).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func runSoakPhase(t *testing.T, p *soakPhase, d time.Duration, seed uint64) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil)) // formats every panic record
	s, err := seqsched.New[int](seqsched.WithMaxConcurrency(p.maxConc),
		seqsched.WithYieldAfter(p.yieldAfter), seqsched.WithLogger(logger))
	require.NoError(t, err)
	keys := make([]soakKey, soakSessions)
	var running, peak atomic.Int64
	var closing, removes atomic.Uint64
	errPanic := errors.New("soak panic")

	start := time.Now()
	deadline := start.Add(d)
	tallies := make([]soakPhase, soakProducers)
	var wg sync.WaitGroup
	for pr := range soakProducers {
		tasks := make(chan *soakTask, 1024)
		// The checker awaits the producer's futures in order.
		wg.Go(func() {
			tl := &tallies[pr]
			for st := range tasks {
				v, err := st.f.Await(context.Background())
				ran := st.ran.Load()
				switch {
				case err == nil && !st.panics && v == st.token && ran == 1:
					tl.ok++
				case errors.Is(err, errPanic) && st.panics && ran == 1:
					tl.panicked++
				case errors.Is(err, context.Canceled) && ran == 0:
					tl.canceled++
				default:
					t.Errorf("task %d (panics %v, canceled %v) ran %d times and resolved with (%d, %v)",
						st.token, st.panics, st.canceled, ran, v, err)
				}
				if st.canceled && ran != 0 {
					t.Errorf("task %d ran though its ctx was canceled before Submit", st.token)
				}
			}
		})
		wg.Go(func() {
			defer close(tasks)
			rng := rand.New(rand.NewPCG(seed, uint64(pr)))
			var next [soakSessions][2]uint64
			for i := uint64(1); ; i++ {
				if i%64 == 0 && time.Now().After(deadline) {
					return
				}
				key := rng.IntN(soakSessions)
				if rng.IntN(2) == 0 {
					key = rng.IntN(soakHot)
				}
				if i%500 == 0 { // periodic Removes
					if err := s.Remove(context.Background(), key); err != nil {
						t.Errorf("Remove(%d) = %v", key, err)
						return
					}
					removes.Add(1)
				}
				prio := seqsched.Normal
				if rng.IntN(4) == 0 {
					prio = seqsched.High
				}
				st := &soakTask{token: uint64(pr)<<48 | i, panics: rng.IntN(100) == 0}
				ctx := context.Background()
				var cancel context.CancelFunc
				if rng.IntN(100) == 0 {
					ctx, cancel = context.WithCancel(ctx)
					if st.canceled = rng.IntN(2) == 0; st.canceled {
						cancel()
					}
				}
				next[key][prio]++
				seq := next[key][prio]
				k := &keys[key]
				f, err := seqsched.Submit(ctx, s, key, func(context.Context) (uint64, error) {
					st.ran.Add(1)
					if k.running.Add(1) != 1 {
						t.Errorf("key %d: two tasks overlap", key)
					}
					defer k.running.Add(-1)
					n := running.Add(1)
					defer running.Add(-1)
					if p.maxConc > 0 && n > int64(p.maxConc) {
						t.Errorf("%d tasks running; limit %d", n, p.maxConc)
					}
					for {
						if old := peak.Load(); n <= old || peak.CompareAndSwap(old, n) {
							break
						}
					}
					if last := k.last[pr][prio]; last >= seq {
						t.Errorf("key %d: producer %d's %v task %d started after its task %d", key, pr, prio, seq, last)
					}
					k.last[pr][prio] = seq
					if st.panics {
						panic(fmt.Errorf("task %d: %w", st.token, errPanic))
					}
					if st.token%16 == 0 {
						runtime.Gosched()
					}
					return st.token, nil
				}, prio)
				if cancel != nil && !st.canceled {
					cancel() // races the task's start: either outcome is fine
				}
				if errors.Is(err, seqsched.ErrSessionClosing) {
					closing.Add(1) // a concurrent Remove of the key
					next[key][prio]--
					if cancel != nil {
						cancel()
					}
					continue
				}
				if err != nil {
					t.Errorf("Submit = %v", err)
					return
				}
				st.f = f
				tasks <- st
			}
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // reports a hang, never reached otherwise
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
	p.elapsed = time.Since(start)
	p.peak = peak.Load()
	p.closing, p.removes = closing.Load(), removes.Load()
	for _, tl := range tallies {
		p.ok += tl.ok
		p.panicked += tl.panicked
		p.canceled += tl.canceled
	}
	p.accepted = p.ok + p.panicked + p.canceled
	st := s.Stats()
	require.Equal(t, p.accepted, st.High.Completed+st.Normal.Completed, "per-priority Completed adds up")
	require.Zero(t, st.High.Queued+st.Normal.Queued)
	require.Equal(t, seqsched.Stats{Submitted: p.accepted, Completed: p.accepted, Skipped: p.canceled,
		Panics: p.panicked, Yields: st.Yields, High: st.High, Normal: st.Normal}, st)
}
