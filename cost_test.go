// The hot path's cost: a task is one allocation, of a size class below
// 128 bytes, and waiting for it allocates nothing, from outside a task or
// from inside one with the task's own ctx. Counts, not timings: the
// timings are the bench module's.

package seqsched_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// TestTaskIsOneSmallAllocation pins the sizes of a task's one allocation
// to the runtime's size classes they fill: 112 bytes for a Go future
// (half the round trip's gap to a goroutine's 24-byte closure was a
// 128-byte future), 128 for a Submit future of an int, 96 for a posted
// task (every message of a stream is one, and the GC marks each).
func TestTaskIsOneSmallAllocation(t *testing.T) {
	goFuture, intFuture, posted := seqsched.TaskSizes()
	require.LessOrEqual(t, goFuture, uintptr(112), "Future[struct{}] size")
	require.LessOrEqual(t, intFuture, uintptr(128), "Future[int] size")
	require.LessOrEqual(t, posted, uintptr(96), "posted task size")
}

// allocs returns the allocations per run of f, after a warm-up run, in
// the whole process (the workers' included), as testing.AllocsPerRun
// counts them: whole allocations, rounded down.
func allocs(t *testing.T, f func()) float64 {
	t.Helper()
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	return testing.AllocsPerRun(200, f)
}

func TestPostAndGoAllocateOnce(t *testing.T) {
	s := newScheduler[int](t)
	h, err := s.Open(1)
	require.NoError(t, err)
	defer h.Close(context.Background())
	ctx := context.Background()
	ran := make(chan struct{})
	signal := func(context.Context) error { ran <- struct{}{}; return nil }

	require.Equal(t, 1.0, allocs(t, func() {
		require.NoError(t, h.Post(ctx, signal))
		<-ran
	}), "allocations per Post")
	require.Equal(t, 1.0, allocs(t, func() {
		f, err := h.Go(ctx, noop)
		require.NoError(t, err)
		_, err = f.Await(ctx)
		require.NoError(t, err)
	}), "allocations per Go and Await with a ctx that never ends")
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	require.Equal(t, 1.0, allocs(t, func() {
		f, err := h.Go(cctx, noop)
		require.NoError(t, err)
		_, err = f.Await(cctx)
		require.NoError(t, err)
	}), "allocations per Go and Await with a ctx that can end")
}

// TestAwaitFromATaskAllocatesNothing: a task that asks another session
// and awaits the answer with its own ctx (request/reply between actors,
// Savina's banking) costs its own allocation and the answer's future,
// nothing more: the wait does not make the task's ctx's done state.
func TestAwaitFromATaskAllocatesNothing(t *testing.T) {
	for _, v := range []struct {
		name string
		ctx  func(t *testing.T) context.Context
	}{
		{"background", func(*testing.T) context.Context { return context.Background() }},
		{"cancelable", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			return ctx
		}},
	} {
		t.Run(v.name, func(t *testing.T) {
			s := newScheduler[int](t)
			ask, err := s.Open(1)
			require.NoError(t, err)
			answer, err := s.Open(2)
			require.NoError(t, err)
			defer ask.Close(context.Background())
			defer answer.Close(context.Background())
			ctx := v.ctx(t)
			asked := make(chan error)
			request := func(ctx context.Context) error {
				f, err := answer.Go(ctx, noop)
				if err == nil {
					_, err = f.Await(ctx)
				}
				asked <- err
				return nil
			}
			require.Equal(t, 2.0, allocs(t, func() {
				require.NoError(t, ask.Post(ctx, request))
				require.NoError(t, <-asked)
			}), "allocations per request (the request's task and the answer's future)")
		})
	}
}

// TestASessionKeepsASpareParkerAfterAWaitLeavesItsOwnToATasksCtx: an Await
// given its task's own ctx parks in that ctx's done slot; when the ctx's
// done state is made meanwhile (someone calls Done), the state takes the
// parker over and the wait leaves it to it. If that parker was the awaited
// session's spare, the session makes another, so that later waits still
// take their parker with one flag's swap instead of the pool.
func TestASessionKeepsASpareParkerAfterAWaitLeavesItsOwnToATasksCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bg := context.Background()
		s := newScheduler[int](t, seqsched.WithShards(1))
		ask, err := s.Open(1)
		require.NoError(t, err)
		answer, err := s.Open(2)
		require.NoError(t, err)
		defer ask.Close(bg)
		defer answer.Close(bg)
		// A round trip whose Await parks: its task waits at a gate until
		// the Await is parked, so that it never finds the future resolved.
		roundTrip := func() {
			gate := make(chan struct{})
			f, err := answer.Go(bg, func(context.Context) error { <-gate; return nil })
			require.NoError(t, err)
			awaited := make(chan error, 1)
			go func() { _, err := f.Await(bg); awaited <- err }()
			synctest.Wait()
			close(gate)
			require.NoError(t, <-awaited)
		}
		roundTrip()
		require.True(t, seqsched.SpareParkerFree(s, 2), "a round trip leaves its parker as the session's spare")

		gate := make(chan struct{})
		asking := make(chan context.Context, 1)
		asked := make(chan error, 1)
		require.NoError(t, ask.Post(bg, func(ctx context.Context) error {
			f, err := answer.Go(ctx, func(context.Context) error { <-gate; return nil })
			if err == nil {
				asking <- ctx
				_, err = f.Await(ctx) // takes the spare, parked in ctx's done slot
			}
			asked <- err
			return nil
		}))
		ctx := <-asking
		synctest.Wait() // the asking task waits in Await, the answer at the gate
		_ = ctx.Done()  // the done state takes the slot, and the spare, over
		close(gate)
		require.NoError(t, <-asked)

		roundTrip()
		require.True(t, seqsched.SpareParkerFree(s, 2), "after the spare was left to a task's ctx, a round trip leaves another")
	})
}
