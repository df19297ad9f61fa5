package seqsched_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// hostile is a submit ctx whose every method is user code that the lock
// check watches; its Err fails the way how says, once.
type hostile struct {
	context.Context
	how  string
	used *atomic.Bool
}

func (c hostile) Err() error {
	if c.used.CompareAndSwap(false, true) {
		switch c.how {
		case "panic":
			panic("Err panicked")
		case "goexit":
			runtime.Goexit()
		}
	}
	return c.Context.Err()
}
func (c hostile) Value(key any) any           { return c.Context.Value(key) }
func (c hostile) Done() <-chan struct{}       { return c.Context.Done() }
func (c hostile) Deadline() (time.Time, bool) { return c.Context.Deadline() }

// No user code runs with a lock of the scheduler held: with the lock check
// on, every call through the one helper looks at the locks its goroutine
// holds. The workload reaches every call site: fn, a submit ctx's methods
// (before the task, on the task's ctx, and when its watches stop), the
// logger, the weight function, the error handler, the reporter of dropped
// posts, and the ctx of Remove, Close, Discard, Await and Shutdown.
func TestUserCodeNeverRunsUnderALock(t *testing.T) {
	stop := seqsched.CheckLocks()
	defer stop()
	logger := slog.New(&funcHandler{handle: func(context.Context, slog.Record) error { return nil }})
	for _, limit := range []int{0, 1} {
		s, err := seqsched.New[string](seqsched.WithMaxConcurrency(limit), seqsched.WithLogger(logger),
			seqsched.WithWeight(func(string) int { return 1 }),
			seqsched.WithErrorHandler(func(string, error) {}),
			seqsched.WithSlowTask(time.Nanosecond))
		require.NoError(t, err)
		parent, cancel := context.WithCancel(context.Background())
		for i, how := range []string{"ok", "panic", "goexit"} {
			ctx := hostile{parent, how, new(atomic.Bool)}
			require.NoError(t, s.Post(ctx, "a", func(tctx context.Context) error {
				select { // makes the ctx's done state: its watches stop when the task ends
				case <-tctx.Done():
				default:
				}
				return nil
			}))
			f, err := s.Go(ctx, "b", func(tctx context.Context) error {
				select {
				case <-tctx.Done():
				default:
				}
				_ = tctx.Value("k")
				if i == 1 {
					panic("fn panicked")
				}
				return errors.New("fn failed")
			})
			require.NoError(t, err)
			_, _ = f.Await(ctx)
		}
		h, err := s.Open("c")
		require.NoError(t, err)
		ctx := hostile{parent, "ok", new(atomic.Bool)}
		require.NoError(t, h.Post(ctx, func(context.Context) error { return errors.New("x") }))
		require.NoError(t, h.Close(ctx))
		require.NoError(t, s.Remove(ctx, "b"))
		require.NoError(t, s.Discard(ctx, "a"))
		release, g := gate(t, s, "d")
		for range 3 {
			require.NoError(t, s.Post(context.Background(), "d", func(context.Context) error { return nil }))
		}
		forced, cancelForced := context.WithCancel(context.Background())
		cancelForced()
		require.ErrorIs(t, s.Shutdown(forced), context.Canceled)
		release()
		awaitAll(t, g)
		require.NoError(t, s.Shutdown(ctx))
		cancel()
	}
	violations, checked := stop()
	require.Zero(t, violations, "user code ran with a lock of the scheduler held")
	require.Greater(t, checked, int64(50), "the check looked at the calls")
	t.Logf("%d calls of user code checked", checked)
}
