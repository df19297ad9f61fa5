package seqsched_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestTasksOfOneSessionRunInSubmissionOrder(t *testing.T) {
	s := newScheduler[string](t)
	// got is not synchronised: the race detector checks that each task
	// happens-before the next task of its session.
	var got []int
	var last *seqsched.Future[struct{}]
	for i := range 1000 {
		f, err := s.Go(context.Background(), "k", func(context.Context) error {
			got = append(got, i)
			return nil
		})
		require.NoError(t, err)
		last = f
	}
	awaitAll(t, last)
	want := make([]int, 1000)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, got)
}

func TestClassicBalanceCaseRunsInOrder(t *testing.T) {
	s := newScheduler[int](t)
	balance := 100 // owned by session 7's tasks only
	op := func(amount int) func(context.Context) (int, error) {
		return func(context.Context) (int, error) {
			if balance+amount < 0 {
				return balance, fmt.Errorf("overdraft: balance %d, amount %d", balance, amount)
			}
			balance += amount
			return balance, nil
		}
	}
	var fs []*seqsched.Future[int]
	for _, amount := range []int{-50, +100, -150} {
		f, err := seqsched.Submit(context.Background(), s, 7, op(amount))
		require.NoError(t, err)
		fs = append(fs, f)
	}
	var got []int
	for _, f := range fs {
		v, err := f.Await(context.Background())
		require.NoError(t, err)
		got = append(got, v)
	}
	assert.Equal(t, []int{50, 150, 0}, got)
}

func TestTasksOfOneSessionNeverOverlap(t *testing.T) {
	s := newScheduler[int](t)
	const producers, perProducer = 8, 500
	var inFlight, maxInFlight atomic.Int32
	counter := 0 // unsynchronised on purpose
	perProducerOrder := make([][]int, producers)
	var wg sync.WaitGroup
	futures := make([][]*seqsched.Future[struct{}], producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perProducer {
				f, err := s.Go(context.Background(), 1, func(context.Context) error {
					n := inFlight.Add(1)
					if n > maxInFlight.Load() {
						maxInFlight.Store(n)
					}
					runtime.Gosched()
					counter++
					perProducerOrder[p] = append(perProducerOrder[p], i)
					inFlight.Add(-1)
					return nil
				})
				if !assert.NoError(t, err) {
					return
				}
				futures[p] = append(futures[p], f)
			}
		}()
	}
	wg.Wait()
	for _, fs := range futures {
		awaitAll(t, fs...)
	}
	require.Equal(t, int32(1), maxInFlight.Load(), "tasks of one session overlapped")
	require.Equal(t, producers*perProducer, counter)
	for p, got := range perProducerOrder {
		for i, v := range got {
			require.Equal(t, i, v, "producer %d: task %d ran as %d", p, i, v)
		}
	}
}

func TestHighOvertakesQueuedNormal(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	release, g := gate(t, s, "k")
	fs := []*seqsched.Future[struct{}]{
		record(t, s, &r, "k", "n1"),
		record(t, s, &r, "k", "n2"),
		record(t, s, &r, "k", "h1", seqsched.High),
		record(t, s, &r, "k", "n3"),
		record(t, s, &r, "k", "h2", seqsched.High),
	}
	release()
	awaitAll(t, append(fs, g)...)
	require.Equal(t, []string{"h1", "h2", "n1", "n2", "n3"}, r.get())
}

func TestHighDoesNotInterruptRunningTask(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	started, open := make(chan struct{}), make(chan struct{})
	running, err := s.Go(context.Background(), "k", func(context.Context) error {
		r.add("normal start")
		close(started)
		<-open
		r.add("normal end")
		return nil
	})
	require.NoError(t, err)
	<-started
	high := record(t, s, &r, "k", "high", seqsched.High)
	queued := record(t, s, &r, "k", "queued normal")
	close(open)
	awaitAll(t, running, high, queued)
	require.Equal(t, []string{"normal start", "normal end", "high", "queued normal"}, r.get())
}

func TestNewStartsNoGoroutine(t *testing.T) {
	goleak.VerifyNone(t) // earlier tests' workers are gone: counts below are this test's
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[int](seqsched.WithMaxConcurrency(4))
		require.NoError(t, err)
		synctest.Wait()
		require.Zero(t, schedulerGoroutines())
		require.NoError(t, s.Shutdown(context.Background()))
		synctest.Wait()
		require.Zero(t, schedulerGoroutines())
	})
}

func TestSessionGetsOneGoroutineOnlyWhileItHasWork(t *testing.T) {
	goleak.VerifyNone(t) // earlier tests' workers are gone: counts below are this test's
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[int]()
		require.NoError(t, err)
		// Each session blocked in its first task with 50 more queued. There
		// are more keys than any scheduler has shards, so that sessions
		// share shards: each must start although every other one blocks.
		const keys = 300
		open := make(chan struct{})
		var fs []*seqsched.Future[struct{}]
		for key := range keys {
			for range 51 {
				f, err := s.Go(context.Background(), key, func(context.Context) error {
					<-open
					return nil
				})
				require.NoError(t, err)
				fs = append(fs, f)
			}
		}
		synctest.Wait()
		require.Equal(t, keys, schedulerGoroutines(), "want one goroutine per busy session")
		st := s.Stats()
		require.Equal(t, keys, st.Sessions)
		require.Equal(t, keys, st.Running, "every session's task must be running")
		require.Equal(t, 50*keys, st.Queued)

		close(open)
		awaitAll(t, fs...)
		synctest.Wait()
		require.Zero(t, schedulerGoroutines(), "idle sessions must hold no goroutine")
		require.Equal(t, 0, s.Stats().Sessions, "idle sessions must be forgotten")
		require.NoError(t, s.Shutdown(context.Background()))
	})
}

func TestManyDistinctKeysLeaveNothingBehind(t *testing.T) {
	goleak.VerifyNone(t) // earlier tests' workers are gone: counts below are this test's
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[int]()
		require.NoError(t, err)
		const keys = 20000
		fs := make([]*seqsched.Future[struct{}], 0, keys)
		for key := range keys {
			f, err := s.Go(context.Background(), key, func(context.Context) error { return nil })
			require.NoError(t, err)
			fs = append(fs, f)
		}
		awaitAll(t, fs...)
		synctest.Wait()
		require.Zero(t, schedulerGoroutines())
		st := s.Stats()
		require.Equal(t, seqsched.Stats{Submitted: keys, Completed: keys,
			Normal: seqsched.PriorityStats{Completed: keys, Outcomes: seqsched.Outcomes{Succeeded: keys}}}, st)
		require.NoError(t, s.Shutdown(context.Background()))
	})
}

func TestSessionsYieldRoundRobinUnderMaxConcurrency(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(10))
	var r recorder
	release, g := gate(t, s, "gate") // holds the only slot
	var fs []*seqsched.Future[struct{}]
	for _, key := range []string{"A", "B"} {
		for range 30 {
			fs = append(fs, record(t, s, &r, key, key))
		}
	}
	release()
	awaitAll(t, append(fs, g)...)

	var want []string
	for range 3 {
		for _, key := range []string{"A", "B"} {
			for range 10 {
				want = append(want, key)
			}
		}
	}
	require.Equal(t, want, r.get())
	// A yields to B at 10 and 20, B to A at 10 and 20; at 30 each is empty.
	require.Equal(t, uint64(4), s.Stats().Yields)
}

func TestYieldAfterSetsTurnLength(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(25))
	var r recorder
	release, g := gate(t, s, "gate")
	var fs []*seqsched.Future[struct{}]
	for _, key := range []string{"A", "B", "C"} {
		for range 50 {
			fs = append(fs, record(t, s, &r, key, key))
		}
	}
	release()
	awaitAll(t, append(fs, g)...)
	var want []string
	for range 2 {
		for _, key := range []string{"A", "B", "C"} {
			for range 25 {
				want = append(want, key)
			}
		}
	}
	require.Equal(t, want, r.get())
}

func TestLoneSessionDrainsWithoutYielding(t *testing.T) {
	for _, opts := range [][]seqsched.Option{nil, {seqsched.WithMaxConcurrency(1)}} {
		t.Run(fmt.Sprint(opts), func(t *testing.T) {
			s := newScheduler[string](t, opts...)
			release, g := gate(t, s, "k")
			var fs []*seqsched.Future[struct{}]
			for range 200 {
				f, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
				require.NoError(t, err)
				fs = append(fs, f)
			}
			release()
			awaitAll(t, append(fs, g)...)
			require.Zero(t, s.Stats().Yields)
		})
	}
}

func TestWithoutLimitBusySessionCallsGosched(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithYieldAfter(10))
	other, og := gate(t, s, "other") // another session with work
	release, g := gate(t, s, "busy")
	var fs []*seqsched.Future[struct{}]
	for range 29 {
		f, err := s.Go(context.Background(), "busy", func(context.Context) error { return nil })
		require.NoError(t, err)
		fs = append(fs, f)
	}
	release()
	awaitAll(t, append(fs, g)...)
	// 30 tasks: a turn ends after the 10th and the 20th with work left.
	require.Equal(t, uint64(2), s.Stats().Yields)
	other()
	awaitAll(t, og)
}

func TestMaxConcurrencyBoundsRunningSessions(t *testing.T) {
	goleak.VerifyNone(t) // earlier tests' workers are gone: counts below are this test's
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[int](seqsched.WithMaxConcurrency(3))
		require.NoError(t, err)
		var running, peak atomic.Int32
		open := make(chan struct{})
		var fs []*seqsched.Future[struct{}]
		for key := range 8 {
			for range 5 {
				f, err := s.Go(context.Background(), key, func(context.Context) error {
					n := running.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					<-open
					running.Add(-1)
					return nil
				})
				require.NoError(t, err)
				fs = append(fs, f)
			}
		}
		synctest.Wait()
		st := s.Stats()
		require.Equal(t, 3, st.Running, "want exactly 3 sessions running")
		require.Equal(t, 8, st.Sessions)
		close(open)
		awaitAll(t, fs...)
		require.Equal(t, int32(3), peak.Load())
		require.NoError(t, s.Shutdown(context.Background()))
	})
}

func TestWaitingSessionsTakeSlotsInArrivalOrder(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	var r recorder
	release, g := gate(t, s, "gate")
	fs := []*seqsched.Future[struct{}]{
		record(t, s, &r, "C", "C"),
		record(t, s, &r, "A", "A"),
		record(t, s, &r, "B", "B"),
		record(t, s, &r, "A", "A2"),
	}
	release()
	awaitAll(t, append(fs, g)...)
	require.Equal(t, []string{"C", "A", "A2", "B"}, r.get())
}

// schedulerGoroutines counts the goroutines running the scheduler's worker
// loop. It reads stacks rather than runtime.NumGoroutine, which also counts
// the runtime's finalizer goroutine while it runs a finalizer.
func schedulerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/seqsched/seqsched.(*Scheduler[") {
			count++
		}
	}
	return count
}
