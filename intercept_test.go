// Interceptors: WithInterceptor wraps every task's fn, in the order of the
// options (the first outermost), on the task's goroutine with its ctx; the
// ctx passed to next reaches fn, and the outermost interceptor's return is
// the task's error.

package seqsched_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

type ctxKey string

func TestInterceptorsNestInOptionOrderAroundFn(t *testing.T) {
	var r recorder
	wrap := func(name string) seqsched.Option {
		return seqsched.WithInterceptor(func(ctx context.Context, key string, next func(context.Context) error) error {
			r.add("%s> %s", name, key)
			err := next(context.WithValue(ctx, ctxKey(name), name))
			r.add("<%s", name)
			return err
		})
	}
	s := newScheduler[string](t, wrap("a"), wrap("b"))
	f, err := seqsched.Submit(context.Background(), s, "k", func(ctx context.Context) (string, error) {
		r.add("fn")
		return ctx.Value(ctxKey("a")).(string) + ctx.Value(ctxKey("b")).(string), nil
	})
	require.NoError(t, err)
	v, err := f.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, "ab", v, "the ctx each interceptor passes reaches fn")
	require.Equal(t, []string{"a> k", "b> k", "fn", "<b", "<a"}, r.get())
}

func TestTheOutermostInterceptorsReturnIsTheTasksError(t *testing.T) {
	errPolicy := errors.New("policy")
	calls := 0
	s := newScheduler[string](t, seqsched.WithInterceptor(func(ctx context.Context, _ string, next func(context.Context) error) error {
		for range 3 { // a retry policy: next may run more than once
			if err := next(ctx); err == nil {
				return nil
			}
		}
		return errPolicy
	}))
	f, err := seqsched.Submit(context.Background(), s, "k", func(context.Context) (int, error) {
		calls++
		if calls < 3 {
			return calls, errors.New("transient")
		}
		return calls, nil
	})
	require.NoError(t, err)
	v, err := f.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, 3, v)

	g, err := s.Go(context.Background(), "k", func(context.Context) error { return errors.New("always") })
	require.NoError(t, err)
	_, err = g.Await(context.Background())
	require.ErrorIs(t, err, errPolicy)
	st := s.Stats()
	require.Equal(t, uint64(1), st.Normal.Outcomes.Succeeded)
	require.Equal(t, uint64(1), st.Normal.Outcomes.Failed)
}

func TestAnInterceptorsPanicIsTheTasks(t *testing.T) {
	var r recorder
	s := newScheduler[string](t, seqsched.WithLogger(r.logger()), seqsched.WithInterceptor(func(ctx context.Context, _ string, next func(context.Context) error) error {
		if ctx.Value(ctxKey("boom")) != nil {
			panic("boom")
		}
		return next(ctx)
	}))
	f, err := s.Go(context.WithValue(context.Background(), ctxKey("boom"), true), "k", func(context.Context) error { return nil })
	require.NoError(t, err)
	_, err = f.Await(context.Background())
	var pe *seqsched.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "boom", pe.Value)
	awaitAll(t, record(t, s, &r, "k", "next"))
}

func TestAnInterceptorsGoexitIsTheTasks(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithLogger(slog.New(slog.DiscardHandler)),
		seqsched.WithInterceptor(func(ctx context.Context, _ string, next func(context.Context) error) error {
			if ctx.Value(ctxKey("exit")) != nil {
				runtime.Goexit()
			}
			return next(ctx)
		}))
	f, err := s.Go(context.WithValue(context.Background(), ctxKey("exit"), true), "k", func(context.Context) error { return nil })
	require.NoError(t, err)
	_, err = f.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrGoexit)
	var r recorder
	awaitAll(t, record(t, s, &r, "k", "next"))
	require.Equal(t, []string{"next"}, r.get(), "the session goes on")
}

func TestTasksThatNeverRunAreNotIntercepted(t *testing.T) {
	var r recorder
	s := newScheduler[string](t, seqsched.WithInterceptor(func(ctx context.Context, _ string, next func(context.Context) error) error {
		r.add("intercepted")
		return next(ctx)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f, err := s.Go(ctx, "k", func(context.Context) error { return nil })
	require.NoError(t, err)
	_, err = f.Await(context.Background())
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, r.get())
}

func TestInterceptorOfAnotherKeyTypeIsRefused(t *testing.T) {
	_, err := seqsched.New[string](seqsched.WithInterceptor(func(ctx context.Context, _ int, next func(context.Context) error) error {
		return next(ctx)
	}))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
	_, err = seqsched.New[string](seqsched.WithInterceptor[string](nil))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
}

func TestEnqueuedSaysWhenAnInterceptedTaskWasQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var waited time.Duration
		s := newScheduler[string](t, seqsched.WithInterceptor(func(ctx context.Context, _ string, next func(context.Context) error) error {
			at, ok := seqsched.Enqueued(ctx)
			require.True(t, ok)
			waited = time.Since(at)
			return next(ctx)
		}))
		release, g := gate(t, s, "k")
		f, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
		require.NoError(t, err)
		time.Sleep(3 * time.Second) // the bubble's clock: the task waits 3 s behind the gate
		release()
		awaitAll(t, g, f)
		require.Equal(t, 3*time.Second, waited)
		_, ok := seqsched.Enqueued(context.Background())
		require.False(t, ok)
	})
}

func TestEnqueuedIsUnknownWithoutAnInterceptorOrWaitHistogram(t *testing.T) {
	s := newScheduler[string](t)
	f, err := seqsched.Submit(context.Background(), s, "k", func(ctx context.Context) (bool, error) {
		_, ok := seqsched.Enqueued(ctx)
		return ok, nil
	})
	require.NoError(t, err)
	ok, err := f.Await(context.Background())
	require.NoError(t, err)
	require.False(t, ok)
}
