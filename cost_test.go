// The hot path's cost: a task is one allocation, of a size class below
// 128 bytes, and waiting for it allocates nothing, from outside a task or
// from inside one with the task's own ctx. Counts, not timings: the
// timings are the bench module's.

package seqsched_test

import (
	"context"
	"testing"

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
