// Idle cost: New starts no goroutine, a session has a goroutine only while
// it has work, and idle sessions, idle handles and shut-down schedulers
// leave nothing behind.

package seqsched_test

import (
	"context"
	"errors"
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
