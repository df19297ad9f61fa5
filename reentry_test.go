package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// Re-entry: fn, the error handler and the logger may call every public
// operation, on their own session, another one, or the scheduler, with the
// ctx they were given; each completes or returns ErrWouldDeadlock.

// reentry is one public operation a callback makes, and what it may return.
type reentry struct {
	name string
	// await: a task, and its submit ctx, are known to Await by the task's
	// ctx (see Future.Await), so this one is not made from fn with
	// another ctx, nor from the submit ctx's Err, which has none.
	await bool
	do    func(ctx context.Context, e *reentryEnv) error
	// want is the only error allowed besides nil (nil: only nil).
	want error
}

// reentryEnv is the scheduler and the sessions a callback reaches.
type reentryEnv struct {
	s      *seqsched.Scheduler[string]
	own    *seqsched.Session[string] // a handle on "a", the callback's session
	ownF   *seqsched.Future[struct{}]
	otherF *seqsched.Future[struct{}] // a task of "b", which can run
}

var reentries = []reentry{
	{name: "Submit own", do: func(ctx context.Context, e *reentryEnv) error {
		_, err := seqsched.Submit(ctx, e.s, "a", func(context.Context) (int, error) { return 0, nil })
		return err
	}},
	{name: "Go other", do: func(ctx context.Context, e *reentryEnv) error {
		_, err := e.s.Go(ctx, "c", func(context.Context) error { return nil })
		return err
	}},
	{name: "Post other", do: func(ctx context.Context, e *reentryEnv) error {
		return e.s.Post(ctx, "c", func(context.Context) error { return nil })
	}},
	{name: "Open and Close other", do: func(ctx context.Context, e *reentryEnv) error {
		h, err := e.s.Open("b")
		if err != nil {
			return err
		}
		return h.Close(ctx) // b's last handle: waits for b's task, which can run
	}},
	{name: "Post own handle", do: func(ctx context.Context, e *reentryEnv) error {
		return e.own.Post(ctx, func(context.Context) error { return nil })
	}},
	{name: "Open own", do: func(_ context.Context, e *reentryEnv) error {
		h, err := e.s.Open("a")
		if err != nil {
			return err
		}
		return h.Close(context.Background()) // not the last handle: returns at once
	}},
	{name: "Queued and Stats", do: func(_ context.Context, e *reentryEnv) error {
		e.s.Queued("a")
		e.own.Queued()
		_ = e.s.Stats()
		return nil
	}},
	{name: "Await own", await: true, want: seqsched.ErrWouldDeadlock, do: func(ctx context.Context, e *reentryEnv) error {
		f, err := e.own.Go(ctx, func(context.Context) error { return nil })
		if err != nil {
			return err
		}
		_, err = f.Await(ctx)
		return err
	}},
	{name: "Await other", await: true, do: func(ctx context.Context, e *reentryEnv) error {
		f, err := e.s.Go(ctx, "b", func(context.Context) error { return nil }) // needs the slot under a limit
		if err != nil {
			return err
		}
		_, err = f.Await(ctx)
		return err
	}},
	{name: "Remove own", want: seqsched.ErrWouldDeadlock, do: func(ctx context.Context, e *reentryEnv) error {
		return e.s.Remove(ctx, "a")
	}},
	{name: "Close own last handle", want: seqsched.ErrWouldDeadlock, do: func(ctx context.Context, e *reentryEnv) error {
		return e.own.Close(ctx)
	}},
	{name: "Discard own", want: seqsched.ErrWouldDeadlock, do: func(ctx context.Context, e *reentryEnv) error {
		return e.own.Discard(ctx)
	}},
	{name: "Remove other", do: func(ctx context.Context, e *reentryEnv) error {
		return e.s.Remove(ctx, "b")
	}},
	{name: "Discard other", do: func(ctx context.Context, e *reentryEnv) error {
		return e.s.Discard(ctx, "b")
	}},
	{name: "Shutdown", want: seqsched.ErrWouldDeadlock, do: func(ctx context.Context, e *reentryEnv) error {
		return e.s.Shutdown(ctx)
	}},
}

// callers are the places user code runs from which the test re-enters.
// Each passes the ctx it was given: re-entry is known by ctx alone.
var callers = []string{"fn", "error handler", "logger"}

func TestEveryCallbackMayReenterAnything(t *testing.T) {
	for _, limit := range []int{0, 1} {
		for _, from := range callers {
			for _, re := range reentries {
				t.Run(fmt.Sprintf("limit=%d/%s/%s", limit, from, re.name), func(t *testing.T) {
					reenterFrom(t, limit, from, re)
				})
			}
		}
	}
}

func reenterFrom(t *testing.T, limit int, from string, re reentry) {
	var e reentryEnv
	result := make(chan error, 1)
	var once sync.Once
	fire := func(ctx context.Context) {
		once.Do(func() {
			c, cancel := context.WithTimeout(ctx, 10*time.Second) // only turns a hang into a failure
			defer cancel()
			result <- re.do(c, &e)
		})
	}
	var armed atomic.Bool // the callbacks fire only once the env is ready
	opts := []seqsched.Option{seqsched.WithMaxConcurrency(limit)}
	switch from {
	case "error handler":
		opts = append(opts, seqsched.WithErrorHandler(func(ctx context.Context, key string, _ error) {
			if key == "a" && armed.Load() {
				fire(ctx)
			}
		}))
	case "logger":
		opts = append(opts, seqsched.WithLogger(slog.New(&funcHandler{handle: func(ctx context.Context, r slog.Record) error {
			if armed.Load() && r.Message == "seqsched: task panicked" {
				fire(ctx)
			}
			return nil
		}})))
	}
	s, err := seqsched.New[string](opts...)
	require.NoError(t, err)
	e.s = s
	e.own, err = s.Open("a")
	require.NoError(t, err)
	e.ownF, err = e.own.Go(context.Background(), func(context.Context) error { return nil })
	require.NoError(t, err)
	awaitAll(t, e.ownF)
	release, g := gate(t, s, "b") // b is busy, then has a task that can run
	e.otherF, err = s.Go(context.Background(), "b", func(context.Context) error { return nil })
	require.NoError(t, err)
	release()
	awaitAll(t, g)
	armed.Store(true)

	// The trigger on "a".
	switch from {
	case "fn":
		_, err = e.own.Go(context.Background(), func(ctx context.Context) error {
			fire(ctx)
			return nil
		})
	case "error handler":
		err = e.own.Post(context.Background(), func(context.Context) error { return errors.New("fail") })
	case "logger":
		err = e.own.Post(context.Background(), func(context.Context) error { panic("logged") })
	}
	require.NoError(t, err)
	select {
	case err := <-result:
		if err != nil && (re.want == nil || !errors.Is(err, re.want)) {
			t.Fatalf("%s from %s = %v; want nil or %v", re.name, from, err, re.want)
		}
		if re.want != nil && err == nil {
			t.Fatalf("%s from %s = nil; want %v", re.name, from, re.want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s from %s did not return: it waits for the goroutine it runs on", re.name, from)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx), "the scheduler shuts down after the re-entry")
}
