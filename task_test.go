package seqsched_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAwaitReturnsValueAndError(t *testing.T) {
	s := newScheduler[string](t)
	boom := errors.New("boom")
	f, err := seqsched.Submit(context.Background(), s, "k", func(context.Context) (string, error) {
		return "partial", boom
	})
	require.NoError(t, err)
	v, err := f.Await(context.Background())
	require.ErrorIs(t, err, boom)
	require.Equal(t, "partial", v)

	// A resolved future answers every later call the same way.
	v, err = f.Await(context.Background())
	require.ErrorIs(t, err, boom)
	require.Equal(t, "partial", v)
}

func TestDoneIsClosedWhenFutureResolves(t *testing.T) {
	s := newScheduler[string](t)
	release, g := gate(t, s, "k")
	f, err := seqsched.Submit(context.Background(), s, "k", func(context.Context) (int, error) { return 42, nil })
	require.NoError(t, err)
	done := f.Done()
	select {
	case <-done:
		t.Fatal("Done closed before the task ran")
	default:
	}
	require.Equal(t, done, f.Done(), "Done must return the same channel")
	release()
	<-done
	v, err := f.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, 42, v)
	<-f.Done() // and stays closed
	awaitAll(t, g)
}

func TestPanicResolvesWithPanicErrorAndSessionContinues(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	s := newScheduler[string](t, seqsched.WithLogger(logger))
	sentinel := errors.New("wrapped")
	type custom struct{ code int }
	for _, tc := range []struct {
		name  string
		value any
	}{
		{"string", "kaboom"},
		{"error", sentinel},
		{"custom type", custom{7}},
		{"nil", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := s.Go(context.Background(), "k", func(context.Context) error { panic(tc.value) })
			require.NoError(t, err)
			next, err := seqsched.Submit(context.Background(), s, "k", func(context.Context) (string, error) { return "next ran", nil })
			require.NoError(t, err)

			_, err = f.Await(context.Background())
			var perr *seqsched.PanicError
			require.ErrorAs(t, err, &perr)
			if tc.value == nil {
				var nilErr *runtime.PanicNilError
				require.ErrorAs(t, perr.Value.(error), &nilErr)
			} else {
				require.Equal(t, tc.value, perr.Value)
			}
			require.Contains(t, string(perr.Stack), "task_test.go", "stack must show where the task panicked")

			v, err := next.Await(context.Background())
			require.NoError(t, err)
			require.Equal(t, "next ran", v)
		})
	}
	_, err := s.Go(context.Background(), "k", func(context.Context) error { panic(sentinel) })
	require.NoError(t, err)
	require.NoError(t, s.Shutdown(context.Background()))
	require.Contains(t, logs.String(), "task panicked")
	require.Equal(t, uint64(5), s.Stats().Panics)
}

func TestPanicErrorUnwrapsErrorValue(t *testing.T) {
	s := newScheduler[string](t)
	f, err := s.Go(context.Background(), "k", func(context.Context) error { panic(context.DeadlineExceeded) })
	require.NoError(t, err)
	_, err = f.Await(context.Background())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, strings.HasPrefix(err.Error(), "seqsched: task panicked: "), err.Error())
}

func TestGoexitResolvesWithErrGoexitAndSessionContinues(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	f, err := s.Go(context.Background(), "k", func(context.Context) error {
		r.add("exiting")
		runtime.Goexit()
		return nil
	})
	require.NoError(t, err)
	next := record(t, s, &r, "k", "next")
	_, err = f.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrGoexit)
	awaitAll(t, next)
	require.Equal(t, []string{"exiting", "next"}, r.get())
}

func TestAwaitContextBoundsOnlyTheWait(t *testing.T) {
	s := newScheduler[string](t)
	release, g := gate(t, s, "k")
	ran := make(chan struct{})
	f, err := s.Go(context.Background(), "k", func(context.Context) error { close(ran); return nil })
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = f.Await(ctx)
	require.ErrorIs(t, err, context.Canceled)

	release()
	<-ran // the task still ran
	<-f.Done()
	_, err = f.Await(ctx)
	require.NoError(t, err, "a resolved future answers whatever the ctx")
	awaitAll(t, g)
}

func TestTaskContextCarriesSubmitterValuesAndDeadline(t *testing.T) {
	s := newScheduler[string](t)
	type key struct{}
	deadline := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), deadline)
	defer cancel()
	f, err := seqsched.Submit(ctx, s, "k", func(ctx context.Context) (any, error) {
		d, ok := ctx.Deadline()
		assert.True(t, ok)
		assert.Equal(t, deadline, d)
		return ctx.Value(key{}), ctx.Err()
	})
	require.NoError(t, err)
	v, err := f.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, "v", v)
}

func TestTaskContextIsCanceledWithSubmitterContext(t *testing.T) {
	for _, derive := range []bool{false, true} {
		name := map[bool]string{false: "task ctx", true: "ctx derived in task"}[derive]
		t.Run(name, func(t *testing.T) {
			s := newScheduler[string](t)
			ctx, cancel := context.WithCancel(context.Background())
			started := make(chan struct{})
			f, err := s.Go(ctx, "k", func(ctx context.Context) error {
				if derive {
					var stop context.CancelFunc
					ctx, stop = context.WithCancel(ctx)
					defer stop()
				}
				close(started)
				<-ctx.Done()
				return ctx.Err()
			})
			require.NoError(t, err)
			<-started
			cancel()
			_, err = f.Await(context.Background())
			require.ErrorIs(t, err, context.Canceled)
		})
	}
}

func TestTaskWhoseContextEndedBeforeStartIsSkipped(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	release, g := gate(t, s, "k")
	ctx, cancel := context.WithCancel(context.Background())
	before := record(t, s, &r, "k", "before")
	skipped, err := s.Go(ctx, "k", func(context.Context) error { r.add("must not run"); return nil })
	require.NoError(t, err)
	after := record(t, s, &r, "k", "after")
	cancel()
	release()
	awaitAll(t, g, before, after)
	_, err = skipped.Await(context.Background())
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{"before", "after"}, r.get())
	require.Equal(t, uint64(1), s.Stats().Skipped)
}

func TestAwaitOwnSessionFromTaskReturnsErrWouldDeadlock(t *testing.T) {
	s := newScheduler[string](t)
	f, err := seqsched.Submit(context.Background(), s, "k", func(ctx context.Context) (string, error) {
		inner, err := seqsched.Submit(ctx, s, "k", func(context.Context) (string, error) { return "inner", nil })
		if err != nil {
			return "", err
		}
		_, err = inner.Await(ctx)
		if !errors.Is(err, seqsched.ErrWouldDeadlock) {
			return "", err
		}
		derived, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		_, err = inner.Await(derived)
		return "guarded", err
	})
	require.NoError(t, err)
	v, err := f.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrWouldDeadlock)
	require.Equal(t, "guarded", v)
}

func TestAwaitOtherSessionFromTaskWorks(t *testing.T) {
	s := newScheduler[string](t)
	f, err := seqsched.Submit(context.Background(), s, "a", func(ctx context.Context) (string, error) {
		other, err := seqsched.Submit(ctx, s, "b", func(context.Context) (string, error) { return "from b", nil })
		if err != nil {
			return "", err
		}
		return other.Await(ctx)
	})
	require.NoError(t, err)
	v, err := f.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, "from b", v)
}

// A finished task's ctx is done (context.Canceled): the deadlock guard does
// not fire for it, and Await treats it as any done ctx.
func TestAwaitWithContextOfFinishedTaskIsNoDeadlock(t *testing.T) {
	s := newScheduler[string](t)
	leaked := make(chan context.Context, 1)
	f, err := s.Go(context.Background(), "k", func(ctx context.Context) error { leaked <- ctx; return nil })
	require.NoError(t, err)
	awaitAll(t, f)
	finished := <-leaked
	require.ErrorIs(t, finished.Err(), context.Canceled, "a task's ctx is done once the task is over")

	release, g := gate(t, s, "k")
	later, err := seqsched.Submit(context.Background(), s, "k", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	_, err = later.Await(finished) // unresolved: the done ctx ends the wait, no ErrWouldDeadlock
	require.ErrorIs(t, err, context.Canceled)
	release()
	awaitAll(t, g)
	v, err := later.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, v)
	v, err = later.Await(finished) // resolved: Await answers whatever ctx's state
	require.NoError(t, err)
	require.Equal(t, 1, v)
}
