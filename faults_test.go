package seqsched_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

func (f *fakeT) Errorf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}
func (f *fakeT) FailNow() { runtime.Goexit() }

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

func TestTaskThatNeverReturnsShutdownGivesUp(t *testing.T) {
	s, err := seqsched.New[string](seqsched.WithMaxConcurrency(1))
	require.NoError(t, err)
	started, stuck := make(chan struct{}), make(chan struct{})
	var ctxErr error
	hung, err := s.Go(context.Background(), "a", func(ctx context.Context) error {
		close(started)
		<-stuck // ignores ctx: only the test ends this task
		ctxErr = ctx.Err()
		return nil
	})
	require.NoError(t, err)
	<-started
	var r recorder
	queued := []*seqsched.Future[struct{}]{
		record(t, s, &r, "a", "a behind the hung task"),
		record(t, s, &r, "b", "b waits for the slot", seqsched.High),
		record(t, s, &r, "c", "c waits for the slot"),
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Shutdown(ctx), context.DeadlineExceeded)

	// Nothing but the hung task itself is blocked.
	for i, f := range queued {
		_, err := f.Await(context.Background())
		require.ErrorIs(t, err, seqsched.ErrClosed, "queued task %d", i)
	}
	_, err = s.Go(context.Background(), "d", func(context.Context) error { return nil })
	require.ErrorIs(t, err, seqsched.ErrClosed)
	require.ErrorIs(t, s.Remove(context.Background(), "b"), seqsched.ErrClosed,
		"after a forced Shutdown, Remove cannot say every accepted task ran")
	canceled, stop := context.WithCancel(context.Background())
	stop()
	require.ErrorIs(t, s.Remove(canceled, "a"), context.Canceled, "a's drain waits for the hung task")
	require.ErrorIs(t, s.Shutdown(canceled), context.Canceled, "a second Shutdown gives up again")
	_, err = hung.Await(canceled)
	require.ErrorIs(t, err, context.Canceled)
	st := s.Stats()
	require.Equal(t, seqsched.Stats{Sessions: 1, Running: 1, Submitted: 4, Completed: 3, Skipped: 3,
		Normal: seqsched.PriorityStats{Completed: 2, Outcomes: seqsched.Outcomes{Skipped: 2}},
		High:   seqsched.PriorityStats{Completed: 1, Outcomes: seqsched.Outcomes{Skipped: 1}}}, st)

	close(stuck)
	awaitAll(t, hung)
	require.ErrorIs(t, ctxErr, context.Canceled, "the task's ctx was canceled when Shutdown gave up")
	require.NoError(t, s.Shutdown(context.Background()), "a later Shutdown waits for the goroutine")
	require.ErrorIs(t, s.Remove(context.Background(), "a"), seqsched.ErrClosed)
	require.Empty(t, r.get(), "no queued task may start after Shutdown gave up")
	st = s.Stats()
	require.Equal(t, seqsched.Stats{Submitted: 4, Completed: 4, Skipped: 3,
		Normal: seqsched.PriorityStats{Completed: 3, Outcomes: seqsched.Outcomes{Succeeded: 1, Skipped: 2}},
		High:   seqsched.PriorityStats{Completed: 1, Outcomes: seqsched.Outcomes{Skipped: 1}}}, st)
}

func TestRemoveSameKeyFromManyGoroutines(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	release, g := gate(t, s, "k")
	var fs []*seqsched.Future[struct{}]
	for i := range 50 {
		fs = append(fs, record(t, s, &r, "k", fmt.Sprint(i)))
	}
	const removers = 64
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	var wg sync.WaitGroup
	errs := make([]error, removers)
	for i := range removers {
		wg.Go(func() {
			ctx := context.Background()
			if i%2 == 1 {
				ctx = canceled // gives up waiting at once; the drain goes on
			}
			errs[i] = s.Remove(ctx, "k")
		})
	}
	// Submits racing the Removes either join the drain or are refused.
	var late []*seqsched.Future[struct{}]
	for i := range 200 {
		f, err := s.Go(context.Background(), "k", func(context.Context) error { r.add("late %d", i); return nil })
		if err != nil {
			require.ErrorIs(t, err, seqsched.ErrSessionClosing)
			continue
		}
		late = append(late, f)
	}
	release()
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 {
			require.NoError(t, err, "Remove %d", i)
		} else if err != nil {
			require.ErrorIs(t, err, context.Canceled, "Remove %d", i)
		}
	}
	awaitAll(t, append(append(fs, late...), g)...)
	var want []string
	for i := range 50 {
		want = append(want, fmt.Sprint(i))
	}
	got := r.get()
	require.Equal(t, want, got[:50], "accepted tasks run in order")
	require.Len(t, got, 50+len(late))
	require.Zero(t, s.Stats().Sessions)
	awaitAll(t, record(t, s, &r, "k", "fresh"))
}

// storm submits from many goroutines to a few keys, which they also Remove
// now and then, until Shutdown (forced or not) refuses them; it checks every
// accepted future and every rejection.
func storm(t *testing.T, forced bool) {
	s, err := seqsched.New[int](seqsched.WithMaxConcurrency(3), seqsched.WithMaxQueue(64))
	require.NoError(t, err)
	const producers, keys = 8, 16
	var ran atomic.Int64
	type result struct {
		accepted []*seqsched.Future[struct{}]
		rejected map[error]int
	}
	results := make([]result, producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			res := result{rejected: map[error]int{}}
			defer func() { results[p] = res }()
			for i := 0; ; i++ {
				key := (p*7 + i) % keys
				if i%50 == 49 {
					if err := s.Remove(context.Background(), key); err != nil && !errors.Is(err, seqsched.ErrClosed) {
						t.Errorf("Remove(%d) = %v", key, err)
						return
					}
				}
				f, err := s.Go(context.Background(), key, func(context.Context) error {
					ran.Add(1)
					runtime.Gosched()
					return nil
				})
				switch {
				case err == nil:
					res.accepted = append(res.accepted, f)
				case errors.Is(err, seqsched.ErrClosed):
					res.rejected[seqsched.ErrClosed]++
					// Closed is for good, on every key.
					for k := range keys {
						if _, err := s.Go(context.Background(), k, func(context.Context) error { return nil }); !errors.Is(err, seqsched.ErrClosed) {
							t.Errorf("Submit after ErrClosed = %v; want ErrClosed", err)
						}
					}
					return
				case errors.Is(err, seqsched.ErrSessionClosing):
					res.rejected[seqsched.ErrSessionClosing]++
				case errors.Is(err, seqsched.ErrQueueFull):
					res.rejected[seqsched.ErrQueueFull]++
				default:
					t.Errorf("Submit = %v", err)
					return
				}
			}
		})
	}
	// Let the storm build up before shutting down in the middle of it.
	for s.Stats().Submitted < 2000 {
		runtime.Gosched()
	}
	ctx, cancel := context.WithCancel(context.Background())
	if forced {
		cancel()
	}
	err = s.Shutdown(ctx)
	cancel()
	if forced {
		if err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
		require.NoError(t, s.Shutdown(context.Background()))
	} else {
		require.NoError(t, err)
	}
	wg.Wait()

	var accepted, ok, closed, closing, full int
	for _, res := range results {
		require.Equal(t, 1, res.rejected[seqsched.ErrClosed], "each producer stops at its first ErrClosed")
		closing += res.rejected[seqsched.ErrSessionClosing]
		full += res.rejected[seqsched.ErrQueueFull]
		for _, f := range res.accepted {
			accepted++
			select {
			case <-f.Done():
			default:
				t.Fatal("future unresolved after Shutdown returned nil")
			}
			_, err := f.Await(context.Background())
			switch {
			case err == nil:
				ok++
			case forced && errors.Is(err, seqsched.ErrClosed):
				closed++
			default:
				t.Fatalf("accepted future resolved with %v", err)
			}
		}
	}
	require.Equal(t, int64(ok), ran.Load(), "every task that resolved nil ran, and only those ran")
	st := s.Stats()
	require.Equal(t, seqsched.Stats{Submitted: uint64(accepted), Completed: uint64(accepted),
		Skipped: uint64(closed), Yields: st.Yields,
		Normal: seqsched.PriorityStats{Completed: uint64(accepted),
			Outcomes: seqsched.Outcomes{Succeeded: uint64(ok), Skipped: uint64(closed)}}}, st, "rejected Submits leave no trace")
	if !forced {
		require.Zero(t, closed)
	}
	t.Logf("accepted %d (ran %d, dropped by Shutdown %d); rejected: closing %d, full %d",
		accepted, ok, closed, closing, full)
}

func TestSubmitStormRacingRemoveAndShutdown(t *testing.T) {
	t.Run("graceful", func(t *testing.T) { storm(t, false) })
	t.Run("forced", func(t *testing.T) { storm(t, true) })
}

func TestAwaitWithAlreadyCancelledContext(t *testing.T) {
	s := newScheduler[string](t)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel2()

	release, g := gate(t, s, "k")
	f, err := seqsched.Submit(context.Background(), s, "k", func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err)
	// Unresolved: the wait ends at once with ctx's error, unchanged.
	_, err = f.Await(canceled)
	require.Equal(t, context.Canceled, err)
	_, err = f.Await(expired)
	require.Equal(t, context.DeadlineExceeded, err)
	// The Awaits gave up but left the future and the task alone.
	select {
	case <-f.Done():
		t.Fatal("future resolved before its task ran")
	default:
	}
	release()
	v, err := f.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, 7, v)
	// Resolved: the result, whatever the ctx.
	v, err = f.Await(canceled)
	require.NoError(t, err)
	require.Equal(t, 7, v)
	awaitAll(t, g)

	// From inside a task, with a canceled ctx derived from the task's: the
	// deadlock guard still answers for the task's own session, and another
	// session's future answers ctx's error.
	releaseOther, other := gate(t, s, "other")
	inner, err := seqsched.Submit(context.Background(), s, "k", func(ctx context.Context) (string, error) {
		own, err := s.Go(ctx, "k", func(context.Context) error { return nil })
		if err != nil {
			return "", err
		}
		dctx, cancel := context.WithCancel(ctx)
		cancel()
		_, ownErr := own.Await(dctx)
		_, otherErr := other.Await(dctx)
		return fmt.Sprintf("own: %v; other: %v", ownErr, otherErr), nil
	})
	require.NoError(t, err)
	v2, err := inner.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, "own: seqsched: would deadlock; other: context canceled", v2)
	releaseOther()
	awaitAll(t, other)
}
