package seqsched_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// Fault cases: what tasks, loggers and callers do wrong must not lose,
// duplicate or reorder work, block unrelated callers, or leak goroutines.

// Found by TestModel (seed 8328051232424530736): the goroutine that takes
// over after a Goexit started a fresh turn, so a session whose tasks called
// Goexit ran more than WithYieldAfter tasks while others waited.
func TestGoexitDoesNotLengthenTurn(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(10))
	var r recorder
	release, g := gate(t, s, "gate") // holds the only slot while we queue
	fs := []*seqsched.Future[struct{}]{}
	for i := range 20 {
		f, err := s.Go(context.Background(), "A", func(context.Context) error {
			r.add("A")
			if i == 4 || i == 8 {
				runtime.Goexit()
			}
			return nil
		})
		require.NoError(t, err)
		fs = append(fs, f)
	}
	for range 10 {
		fs = append(fs, record(t, s, &r, "B", "B"))
	}
	release()
	for i, f := range fs {
		_, err := f.Await(context.Background())
		if i == 4 || i == 8 {
			require.ErrorIs(t, err, seqsched.ErrGoexit)
		} else {
			require.NoError(t, err, "future %d", i)
		}
	}
	awaitAll(t, g)
	var want []string
	for _, key := range []string{"A", "B", "A"} {
		for range 10 {
			want = append(want, key)
		}
	}
	require.Equal(t, want, r.get(), "A's turn must end after 10 tasks, Goexits included")
}

// fakeT is the part of *testing.T that require uses: like testing.T, its
// FailNow calls runtime.Goexit.
type fakeT struct{ msgs []string }

func (f *fakeT) Errorf(format string, args ...any) { f.msgs = append(f.msgs, fmt.Sprintf(format, args...)) }
func (f *fakeT) FailNow()                          { runtime.Goexit() }

func TestGoexitAnywhereResolvesAndSessionContinues(t *testing.T) {
	// One slot, so the Goexits' successor goroutines must keep it: B only
	// runs if the slot survives them.
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	var r recorder
	release, g := gate(t, s, "A")
	var deferred atomic.Int32
	goexit := func(name string) func(context.Context) error {
		return func(context.Context) error {
			defer deferred.Add(1) // a Goexit still runs the task's defers
			r.add("%s", name)
			var ft fakeT
			require.NoError(&ft, errors.New(name)) // t.FailNow inside a task
			return nil
		}
	}
	var exits []*seqsched.Future[struct{}]
	for _, tc := range []struct {
		name string
		opts []seqsched.TaskOption
	}{{"x1", nil}, {"x2", nil}, {"hx", []seqsched.TaskOption{seqsched.High}}} {
		f, err := s.Go(context.Background(), "A", goexit(tc.name), tc.opts...)
		require.NoError(t, err)
		exits = append(exits, f)
	}
	after := record(t, s, &r, "A", "after")
	other := record(t, s, &r, "B", "B")
	last, err := s.Go(context.Background(), "C", goexit("last")) // the last task of its session
	require.NoError(t, err)
	exits = append(exits, last)
	release()
	for i, f := range exits {
		_, err := f.Await(context.Background())
		require.ErrorIs(t, err, seqsched.ErrGoexit, "future %d", i)
	}
	awaitAll(t, g, after, other)
	require.Equal(t, []string{"hx", "x1", "x2", "after", "B", "last"}, r.get())
	require.Equal(t, int32(4), deferred.Load())
	require.NoError(t, s.Shutdown(context.Background()))
	st := s.Stats()
	require.Equal(t, uint64(4), st.Panics, "Goexits are counted with panics")
	require.Equal(t, st.Submitted, st.Completed)
}

// stringer panics when printed: loggers and Error() must not take the
// scheduler down with it.
type stringer struct{}

func (stringer) String() string { panic("String panicked") }

func TestPanicWithValueThatPanicsWhenPrinted(t *testing.T) {
	var logs bytes.Buffer
	s := newScheduler[string](t, seqsched.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	f, err := s.Go(context.Background(), "k", func(context.Context) error { panic(stringer{}) })
	require.NoError(t, err)
	next := record(t, s, &recorder{}, "k", "next")
	_, err = f.Await(context.Background())
	var perr *seqsched.PanicError
	require.ErrorAs(t, err, &perr)
	require.Equal(t, stringer{}, perr.Value)
	awaitAll(t, next)
}

// panicHandler is a slog.Handler that panics where told to.
type panicHandler struct{ inEnabled, inHandle bool }

func (h panicHandler) Enabled(context.Context, slog.Level) bool {
	if h.inEnabled {
		panic("Enabled panicked")
	}
	return true
}

func (h panicHandler) Handle(context.Context, slog.Record) error {
	if h.inHandle {
		panic("Handle panicked")
	}
	return nil
}

func (h panicHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h panicHandler) WithGroup(string) slog.Handler      { return h }

func TestLoggerThatPanicsDoesNotStopScheduler(t *testing.T) {
	for _, h := range []panicHandler{{inHandle: true}, {inEnabled: true}} {
		t.Run(fmt.Sprintf("%+v", h), func(t *testing.T) {
			// Every record the scheduler logs: a panic (Error), a Goexit
			// (Error), a yield (Debug, under a limit with two sessions).
			s := newScheduler[string](t, seqsched.WithLogger(slog.New(h)),
				seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(10))
			var r recorder
			release, g := gate(t, s, "gate")
			boom, err := s.Go(context.Background(), "A", func(context.Context) error { panic("boom") })
			require.NoError(t, err)
			exit, err := s.Go(context.Background(), "A", func(context.Context) error { runtime.Goexit(); return nil })
			require.NoError(t, err)
			var fs []*seqsched.Future[struct{}]
			for range 20 {
				fs = append(fs, record(t, s, &r, "A", "A"), record(t, s, &r, "B", "B"))
			}
			release()
			awaitAll(t, append(fs, g)...)
			_, err = boom.Await(context.Background())
			require.ErrorAs(t, err, new(*seqsched.PanicError))
			_, err = exit.Await(context.Background())
			require.ErrorIs(t, err, seqsched.ErrGoexit)
			require.Len(t, r.get(), 40)
			require.NoError(t, s.Shutdown(context.Background()))
			st := s.Stats()
			require.Equal(t, uint64(2), st.Panics)
			require.NotZero(t, st.Yields)
		})
	}
}
