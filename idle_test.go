// Idle cost: New starts no goroutine, a session has a goroutine only while
// it has work, idle sessions, idle handles and shut-down schedulers leave
// nothing behind, and the idle records kept for reuse stay within their
// cap.

package seqsched_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

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

func TestIdleHandleKeepsNoGoroutine(t *testing.T) {
	s := newScheduler[int](t)
	ignore := goleak.IgnoreCurrent()
	h, err := s.Open(1)
	require.NoError(t, err)
	f, err := h.Go(context.Background(), func(context.Context) error { return nil })
	require.NoError(t, err)
	awaitAll(t, f)
	require.NoError(t, goleak.Find(ignore), "an idle handle's session holds no goroutine")
	require.Zero(t, s.Stats().Sessions, "an idle session is not counted, pinned or not")
	f, err = h.Go(context.Background(), func(context.Context) error { return nil })
	require.NoError(t, err)
	awaitAll(t, f)
	require.NoError(t, h.Close(context.Background()))
}

// TestThousandSchedulersLeaveNoGoroutine creates and shuts down 1,000
// schedulers of every shape — unused, idle, busy, gracefully or forcibly
// stopped — and then finds no goroutine left.
func TestThousandSchedulersLeaveNoGoroutine(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 1000 {
		var opts []seqsched.Option
		if i%2 == 1 {
			opts = append(opts, seqsched.WithMaxConcurrency(1+i%3))
		}
		s, err := seqsched.New[int](opts...)
		require.NoError(t, err)
		var fs []*seqsched.Future[struct{}]
		for k := range i % 5 { // 0 to 4 sessions
			for range 3 {
				f, err := s.Go(context.Background(), k, func(context.Context) error { return nil })
				require.NoError(t, err)
				fs = append(fs, f)
			}
		}
		if i%7 == 0 { // forced: drops what has not started
			err := s.Shutdown(canceled)
			if err != nil {
				require.ErrorIs(t, err, context.Canceled)
			}
		}
		require.NoError(t, s.Shutdown(context.Background()))
		for _, f := range fs {
			if _, err := f.Await(context.Background()); err != nil && !errors.Is(err, seqsched.ErrClosed) {
				t.Fatalf("scheduler %d: future resolved with %v", i, err)
			}
		}
	}
	goleak.VerifyNone(t, ignore)
}

// idleCap is the idle records the record tests let a scheduler keep.
const idleCap = 4

// TestIdleRecordsKeepTheRecentlyIdleWithinTheirCap: a shard keeps at most
// its cap of idle records, and past it forgets the one idle longest, where
// a key that went idle again since counts as recent and a key that got
// work is no record until it is idle again. The idle list is kept lazily
// (keepIdle): these are the cases where laziness could keep a record past
// the cap or forget the wrong one.
func TestIdleRecordsKeepTheRecentlyIdleWithinTheirCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[int](t, seqsched.WithShards(1), seqsched.WithIdleRecords(idleCap))
		ctx := context.Background()
		run := func(keys ...int) {
			t.Helper()
			for _, key := range keys {
				f, err := s.Go(ctx, key, func(context.Context) error { return nil })
				require.NoError(t, err)
				awaitAll(t, f)
			}
		}
		records := func(want ...int) {
			t.Helper()
			synctest.Wait() // every worker has retired its session and exited
			keys, listed, err := seqsched.IdleRecords(s)
			require.NoError(t, err)
			require.Equal(t, want, keys, "idle records, least recently idle first")
			require.LessOrEqual(t, listed, idleCap, "sessions on the idle list")
		}

		run(1, 2, 3, 4, 5)
		records(2, 3, 4, 5) // 1, idle longest, forgotten

		run(2)
		run(6)
		records(4, 5, 6, 2) // 2 went idle again after 3: 3 forgotten, not 2

		gate := make(chan struct{})
		blocked, err := s.Go(ctx, 4, func(context.Context) error { <-gate; return nil })
		require.NoError(t, err)
		records(5, 6, 2) // 4 runs: no record while it has work
		run(7, 8)
		records(6, 2, 7, 8) // 4 still runs: 5, the oldest record, forgotten to make room
		close(gate)
		awaitAll(t, blocked)
		records(2, 7, 8, 4) // 4 idle again, the newest: 6 forgotten

		gate = make(chan struct{})
		blocked, err = s.Go(ctx, 7, func(context.Context) error { <-gate; return nil })
		require.NoError(t, err)
		removed := make(chan error, 1)
		go func() { removed <- s.Remove(ctx, 7) }()
		synctest.Wait() // Remove waits for 7's drain
		close(gate)
		awaitAll(t, blocked)
		require.NoError(t, <-removed)
		records(2, 8, 4) // 7, removed while it ran, is forgotten, not kept
		run(9, 10)
		records(8, 4, 9, 10)
	})
}

// TestIdleRecordsStayWithinTheirCapUnderChurn: keys that come and go at
// random, some held running across others' turns, some paused, never leave
// a shard more idle records than its cap, nor an idle record that no cap
// reaches (IdleRecords checks each shard's list against its cap, and that
// every idle record is listed).
func TestIdleRecordsStayWithinTheirCapUnderChurn(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[int](t, seqsched.WithShards(2), seqsched.WithIdleRecords(2*idleCap))
		ctx := context.Background()
		for round := range 300 {
			gate := make(chan struct{})
			var fs []*seqsched.Future[struct{}]
			paused := -1
			if rng.IntN(4) == 0 {
				paused = rng.IntN(3 * idleCap)
				require.NoError(t, s.Pause(paused))
			}
			for range 1 + rng.IntN(6) {
				body := func(context.Context) error { return nil }
				if rng.IntN(3) == 0 {
					body = func(context.Context) error { <-gate; return nil }
				}
				f, err := s.Go(ctx, rng.IntN(3*idleCap), body)
				require.NoError(t, err)
				fs = append(fs, f)
			}
			synctest.Wait()
			keys, listed, err := seqsched.IdleRecords(s)
			require.NoError(t, err, "round %d", round)
			require.LessOrEqual(t, len(keys), 2*idleCap, "round %d: idle records", round)
			require.LessOrEqual(t, listed, 2*idleCap, "round %d: sessions on the idle lists", round)
			if paused >= 0 {
				require.NoError(t, s.Resume(paused))
			}
			close(gate)
			awaitAll(t, fs...)
		}
		synctest.Wait()
		keys, _, err := seqsched.IdleRecords(s)
		require.NoError(t, err)
		require.LessOrEqual(t, len(keys), 2*idleCap, "idle records once quiet")
	})
}
