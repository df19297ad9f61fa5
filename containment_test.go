// Containment: every goroutine the scheduler starts has one guard at its
// top. A panic, a runtime.Goexit, a panic raised while a Goexit unwinds or
// a Goexit called while a panic unwinds, in anything it calls (fn, an
// interceptor, the error handler, the log handler, the weight and rate
// functions, and methods of values they return), fails the task at hand or
// is logged; the session goes on, and nothing is lost: Shutdown returns
// nil and no goroutine is left.
// Every failure reaches the error handler, or without one the logger (by
// default slog.Default()) at its level.

package seqsched_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// shutdownClean shuts s down and checks that nothing is left running.
func shutdownClean(t *testing.T, s *seqsched.Scheduler[string]) {
	t.Helper()
	require.NoError(t, s.Shutdown(context.Background()))
	require.Zero(t, seqsched.Live(s), "every goroutine of the scheduler gave its token back")
	st := s.Stats()
	require.Equal(t, st.Submitted, st.Completed, "every accepted task resolved")
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
			require.Contains(t, string(perr.Stack), "containment_test.go", "stack must show where the task panicked")

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

func TestFnPanicAndGoexitFailTheTaskAndTheSessionGoesOn(t *testing.T) {
	var logs recorder
	s, err := seqsched.New[string](seqsched.WithLogger(logs.logger()))
	require.NoError(t, err)
	p, err := s.Go(context.Background(), "a", func(context.Context) error { panic("boom") })
	require.NoError(t, err)
	g, err := s.Go(context.Background(), "a", func(context.Context) error { runtime.Goexit(); return nil })
	require.NoError(t, err)
	after, err := seqsched.Submit(context.Background(), s, "a", func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err)

	_, err = p.Await(context.Background())
	var perr *seqsched.PanicError
	require.ErrorAs(t, err, &perr)
	require.Equal(t, "boom", perr.Value)
	require.Contains(t, string(perr.Stack), "containment_test.go", "the stack is the panicking goroutine's")
	_, err = g.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrGoexit)
	n, err := after.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, 7, n)
	shutdownClean(t, s)
	require.Equal(t, []string{"ERROR seqsched: task panicked", "ERROR seqsched: task called runtime.Goexit"}, logs.get())
	require.Equal(t, uint64(2), s.Stats().Panics)
}

func TestErrorHandlerPanicOrGoexitIsLoggedAndTheNextReportGoesOn(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			var logs recorder
			var mu sync.Mutex
			var reported []string
			s, err := seqsched.New[string](seqsched.WithLogger(logs.logger()),
				seqsched.WithErrorHandler(func(_ context.Context, key string, err error) {
					mu.Lock()
					reported = append(reported, err.Error())
					first := len(reported) == 1
					mu.Unlock()
					if first && how == "panic" {
						panic("handler")
					}
					if first {
						runtime.Goexit()
					}
				}))
			require.NoError(t, err)
			for i := range 3 {
				require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return fmt.Errorf("e%d", i) }))
			}
			require.NoError(t, s.Remove(context.Background(), "a"))
			mu.Lock()
			require.Equal(t, []string{"e0", "e1", "e2"}, reported, "each failure reported once, in order")
			mu.Unlock()
			shutdownClean(t, s)
			want := "ERROR seqsched: WithErrorHandler panicked"
			if how == "goexit" {
				want = "ERROR seqsched: WithErrorHandler called runtime.Goexit"
			}
			require.Equal(t, []string{want}, logs.get())
		})
	}
}

func TestErrorHandlerThatPanicsOrGoexitsStopsNoTaskNorShutdown(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		for _, limit := range []int{0, 1} {
			var calls sync.WaitGroup
			calls.Add(20)
			handler := func(_ context.Context, key int, err error) {
				defer calls.Done()
				if how == "panic" {
					panic("handler panicked")
				}
				runtime.Goexit()
			}
			s := newScheduler[int](t, seqsched.WithErrorHandler(handler), seqsched.WithMaxConcurrency(limit))
			var r recorder
			for i := range 20 {
				require.NoError(t, s.Post(context.Background(), i%2, func(context.Context) error {
					r.add("%d", i)
					return fmt.Errorf("task %d failed", i)
				}))
			}
			calls.Wait()
			require.NoError(t, s.Shutdown(context.Background()), "%s, limit %d", how, limit)
			require.Len(t, r.get(), 20)
		}
	}
}

func TestLogHandlerPanicOrGoexitDropsOnlyItsRecord(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			// The log handler misbehaves on the first record of a failed
			// post, once it has collected it.
			var logs recorder
			var misbehaved atomic.Bool
			collect := logs.handler().handle
			handler := &funcHandler{handle: func(ctx context.Context, rec slog.Record) error {
				if err := collect(ctx, rec); err != nil {
					return err
				}
				if rec.Message == "seqsched: posted task failed" && !misbehaved.Swap(true) {
					if how == "goexit" {
						runtime.Goexit()
					}
					panic("logger " + rec.Message)
				}
				return nil
			}}
			s, err := seqsched.New[string](seqsched.WithLogger(slog.New(handler)))
			require.NoError(t, err)
			for i := range 3 {
				require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return fmt.Errorf("e%d", i) }))
			}
			f, err := s.Go(context.Background(), "a", func(context.Context) error { return nil })
			require.NoError(t, err)
			awaitAll(t, f)
			require.NoError(t, s.Remove(context.Background(), "a"))
			shutdownClean(t, s)
			require.Equal(t, []string{
				"ERROR seqsched: posted task failed", // the one the handler failed on, seen before it failed
				"ERROR seqsched: posted task failed",
				"ERROR seqsched: posted task failed",
			}, logs.get())
		})
	}
}

// A posted task's failure reaches the handler even when the logger calls
// runtime.Goexit while it logs the task's panic.
func TestPostFailureIsReportedWhenLoggerGoexits(t *testing.T) {
	var fl failures
	logger := &funcHandler{handle: func(context.Context, slog.Record) error { runtime.Goexit(); return nil }}
	s := newScheduler[string](t, seqsched.WithErrorHandler(fl.handle), seqsched.WithLogger(slog.New(logger)))
	require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { panic("oops") }))
	require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return errors.New("second") }))
	require.NoError(t, s.Remove(context.Background(), "a"))
	errs := fl.get("a")
	require.Len(t, errs, 2)
	var perr *seqsched.PanicError
	require.ErrorAs(t, errs[0], &perr)
	require.Equal(t, "oops", perr.Value)
	require.EqualError(t, errs[1], "second")
	require.Equal(t, uint64(1), s.Stats().Panics, "fn's panic counts as a panic")
}

func TestWeightPanicOrGoexitCountsAsOneAndIsLoggedOnce(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			var logs recorder
			s, err := seqsched.New[string](seqsched.WithLogger(logs.logger()), seqsched.WithWeight(func(string) int {
				if how == "panic" {
					panic("weight")
				}
				runtime.Goexit()
				return 1
			}))
			require.NoError(t, err)
			var ran recorder
			var fs []*seqsched.Future[struct{}]
			for i := range 25 {
				fs = append(fs, record(t, s, &ran, "a", fmt.Sprint(i)))
			}
			awaitAll(t, fs...)
			require.Len(t, ran.get(), 25)
			shutdownClean(t, s)
			msgs := logs.get()
			require.Len(t, msgs, 1, "the weight function failed on every turn; it is logged once per scheduler")
			require.Contains(t, msgs[0], "ERROR seqsched: WithWeight")
		})
	}
}

// panicky is a value whose methods panic or call runtime.Goexit: an error
// whose Error does, or a panic value whose String does. The scheduler calls
// no method of it itself; the log handler that formats it runs under the
// guard.
type panicky struct{ how string }

func (p panicky) misbehave() {
	if p.how == "goexit" {
		runtime.Goexit()
	}
	panic("method of a user value")
}

func (p panicky) Error() string { p.misbehave(); return "" }

func (p panicky) String() string { p.misbehave(); return "" }

func (p panicky) Is(error) bool { p.misbehave(); return false }

func (p panicky) Unwrap() error { p.misbehave(); return nil }

func (p panicky) As(any) bool { p.misbehave(); return false }

func (p panicky) Format(fmt.State, rune) { p.misbehave() }

func TestMethodsOfUserValuesThatPanicOrGoexitLoseNothing(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			var logs recorder
			s, err := seqsched.New[string](seqsched.WithLogger(logs.logger()))
			require.NoError(t, err)
			v := panicky{how}
			// A posted fn's error whose methods misbehave, and a panic value
			// whose String does: the logger formats both.
			require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return v }))
			require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { panic(v) }))
			var ran recorder
			last := record(t, s, &ran, "a", "after")
			awaitAll(t, last)
			require.Equal(t, []string{"after"}, ran.get())
			require.NoError(t, s.Remove(context.Background(), "a"))
			shutdownClean(t, s)
			st := s.Stats()
			require.Equal(t, uint64(3), st.Completed)
			require.Equal(t, uint64(1), st.Panics)
		})
	}
}

func TestPostFailuresGoToTheErrorHandler(t *testing.T) {
	var fl failures
	s := newScheduler[string](t, seqsched.WithErrorHandler(fl.handle))
	h, err := s.Open("a")
	require.NoError(t, err)
	release, g := gate(t, s, "a")
	boom := errors.New("boom")
	canceled, cancel := context.WithCancel(context.Background())
	require.NoError(t, h.Post(context.Background(), func(context.Context) error { return boom }))
	require.NoError(t, h.Post(context.Background(), func(context.Context) error { panic("oops") }))
	require.NoError(t, h.Post(context.Background(), func(context.Context) error { runtime.Goexit(); return nil }))
	require.NoError(t, h.Post(canceled, func(context.Context) error { t.Error("a task whose ctx ended ran"); return nil }))
	require.NoError(t, h.Post(context.Background(), func(context.Context) error { return nil }))
	cancel()
	release()
	awaitAll(t, g)
	require.NoError(t, h.Close(context.Background()))
	errs := fl.get("a")
	require.Len(t, errs, 4)
	require.ErrorIs(t, errs[0], boom)
	var perr *seqsched.PanicError
	require.ErrorAs(t, errs[1], &perr)
	require.Equal(t, "oops", perr.Value)
	require.ErrorIs(t, errs[2], seqsched.ErrGoexit)
	require.ErrorIs(t, errs[3], context.Canceled)
}

func TestPostWithoutHandlerLogsFailures(t *testing.T) {
	var mu sync.Mutex
	var msgs []string
	h := &funcHandler{handle: func(_ context.Context, r slog.Record) error {
		mu.Lock()
		defer mu.Unlock()
		var attrs []string
		r.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a.String()); return true })
		msgs = append(msgs, r.Level.String()+" "+r.Message+" "+strings.Join(attrs, " "))
		return nil
	}}
	s, err := seqsched.New[string](seqsched.WithLogger(slog.New(h)))
	require.NoError(t, err)
	require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return errors.New("boom") }))
	require.NoError(t, s.Shutdown(context.Background()))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"ERROR seqsched: posted task failed error=boom session=a"}, msgs)
}

func TestAPostedFnsOwnFailureIsLoggedAtErrorWhateverItWraps(t *testing.T) {
	var logs recorder
	s, err := seqsched.New[string](seqsched.WithLogger(logs.logger()))
	require.NoError(t, err)
	for _, e := range []error{
		context.DeadlineExceeded,                    // a database call's timeout
		fmt.Errorf("db: %w", context.Canceled),      // wrapped
		fmt.Errorf("other: %w", seqsched.ErrClosed), // another scheduler's ErrClosed, wrapped
		fmt.Errorf("peer: %w", seqsched.ErrDiscarded),
	} {
		require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return e }))
	}
	require.NoError(t, s.Remove(context.Background(), "a"))
	shutdownClean(t, s)
	require.Equal(t, []string{
		"ERROR seqsched: posted task failed",
		"ERROR seqsched: posted task failed",
		"ERROR seqsched: posted task failed",
		"ERROR seqsched: posted task failed",
	}, logs.get())
}

// Without WithLogger or WithErrorHandler, failures reach slog.Default(): a
// posted task's own error at Error, one that never ran because its
// submitter's ctx ended, or Discard dropped it, at Debug.
func TestFailuresReachTheDefaultLoggerAtTheirLevel(t *testing.T) {
	var rh recorder
	old := slog.Default()
	slog.SetDefault(rh.logger())
	defer slog.SetDefault(old)
	s := newScheduler[string](t) // captures slog.Default() now
	require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return errors.New("write failed") }))
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, s.Post(canceled, "a", func(context.Context) error { return nil }))
	release, g := gate(t, s, "b")
	require.NoError(t, s.Post(context.Background(), "b", func(context.Context) error { return nil }))
	done := make(chan error, 1)
	go func() { done <- s.Discard(context.Background(), "b") }()
	require.Eventually(t, func() bool { h, n := s.Queued("b"); return h+n == 0 }, 10*time.Second, time.Millisecond)
	release()
	require.NoError(t, <-done)
	awaitAll(t, g)
	require.NoError(t, s.Remove(context.Background(), "a"))
	require.ElementsMatch(t, []string{
		"ERROR seqsched: posted task failed",
		"DEBUG seqsched: posted task failed",
		"DEBUG seqsched: posted task failed",
	}, rh.get())
}

// panickyCtx is a submit ctx that breaks its contract: Err panics or calls
// runtime.Goexit. A ctx is trusted, but the scheduler's goroutine still
// never crashes the process: the task it belongs to fails, unrun.
type panickyCtx struct {
	context.Context
	how string
}

func (c panickyCtx) Err() error {
	if c.how == "goexit" {
		runtime.Goexit()
	}
	panic("Err")
}

func TestASubmitCtxThatPanicsFailsOnlyItsOwnTask(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			var logs recorder
			s, err := seqsched.New[string](seqsched.WithLogger(logs.logger()))
			require.NoError(t, err)
			var ran recorder
			bad, err := s.Go(panickyCtx{context.Background(), how}, "a", func(context.Context) error { ran.add("bad"); return nil })
			require.NoError(t, err)
			good := record(t, s, &ran, "a", "good")
			_, err = bad.Await(context.Background())
			if how == "panic" {
				var perr *seqsched.PanicError
				require.ErrorAs(t, err, &perr)
				require.Equal(t, "Err", perr.Value)
			} else {
				require.ErrorIs(t, err, seqsched.ErrGoexit)
			}
			awaitAll(t, good)
			require.Equal(t, []string{"good"}, ran.get())
			shutdownClean(t, s)
			require.Equal(t, uint64(1), s.Stats().Skipped)
			require.Len(t, logs.get(), 1)
		})
	}
}

// endings are the four ways a callback can leave other than by returning:
// a panic, runtime.Goexit, a panic raised while a Goexit unwinds (Go
// resumes the Goexit once the panic is recovered), and runtime.Goexit
// called from a deferred function while a panic unwinds.
var endings = []string{"panic", "goexit", "panic during goexit", "goexit during panic"}

// end leaves the calling callback the way how names.
func end(how string) {
	switch how {
	case "panic":
		panic("callback panicked")
	case "goexit":
		runtime.Goexit()
	case "panic during goexit":
		defer func() { panic("panicked during goexit") }()
		runtime.Goexit()
	case "goexit during panic":
		defer runtime.Goexit()
		panic("panicked before goexit")
	}
}

// requireEndedBy checks err, the error of a task whose fn (or the user
// code around it) left by end(how): a *PanicError with the panic's value,
// or ErrGoexit when the goroutine's last word was a Goexit.
func requireEndedBy(t *testing.T, err error, how string, msgAndArgs ...any) {
	t.Helper()
	var perr *seqsched.PanicError
	switch how {
	case "panic":
		require.ErrorAs(t, err, &perr, msgAndArgs...)
		require.Equal(t, "callback panicked", perr.Value, msgAndArgs...)
	case "panic during goexit":
		require.ErrorAs(t, err, &perr, msgAndArgs...)
		require.Equal(t, "panicked during goexit", perr.Value, msgAndArgs...)
	default:
		require.ErrorIs(t, err, seqsched.ErrGoexit, msgAndArgs...)
	}
}

// misbehaving is a callback kind made to leave by one of the endings, the
// first time it is called: a scheduler option, or (fn, ctx) the task.
type misbehaving struct {
	name string
	// opts returns the scheduler's options; first says whether this call
	// is the first, and ends it when it is.
	opts func(first func() bool, how string) []seqsched.Option
	// submit queues the task that makes the callback run on key "k".
	submit func(t *testing.T, s *seqsched.Scheduler[string], first func() bool, how string) *seqsched.Future[struct{}]
}

// goTask queues a task on "k" that succeeds.
func goTask(t *testing.T, s *seqsched.Scheduler[string], _ func() bool, _ string) *seqsched.Future[struct{}] {
	t.Helper()
	f, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
	require.NoError(t, err)
	return f
}

// postFailing posts a task on "k" whose failure is reported, and returns
// nil: it has no future.
func postFailing(t *testing.T, s *seqsched.Scheduler[string], _ func() bool, _ string) *seqsched.Future[struct{}] {
	t.Helper()
	require.NoError(t, s.Post(context.Background(), "k", func(context.Context) error { return errors.New("failed") }))
	return nil
}

// everyCallback is every kind of user code the scheduler runs on its own
// goroutines.
var everyCallback = []misbehaving{
	{name: "fn", submit: func(t *testing.T, s *seqsched.Scheduler[string], _ func() bool, how string) *seqsched.Future[struct{}] {
		f, err := s.Go(context.Background(), "k", func(context.Context) error { end(how); return nil })
		require.NoError(t, err)
		return f
	}},
	{name: "interceptor", submit: goTask, opts: func(first func() bool, how string) []seqsched.Option {
		return []seqsched.Option{seqsched.WithInterceptor(func(ctx context.Context, _ string, next func(context.Context) error) error {
			if first() {
				defer end(how) // after next ran fn: the interceptor's own ending
			}
			return next(ctx)
		})}
	}},
	{name: "error handler", submit: postFailing, opts: func(first func() bool, how string) []seqsched.Option {
		return []seqsched.Option{seqsched.WithErrorHandler(func(context.Context, string, error) {
			if first() {
				end(how)
			}
		})}
	}},
	{name: "weight", submit: goTask, opts: func(first func() bool, how string) []seqsched.Option {
		return []seqsched.Option{seqsched.WithWeight(func(string) int {
			if first() {
				end(how)
			}
			return 1
		})}
	}},
	{name: "rate", submit: goTask, opts: func(first func() bool, how string) []seqsched.Option {
		return []seqsched.Option{seqsched.WithRate(func(string) (float64, int) {
			if first() {
				end(how)
			}
			return 0, 0
		})}
	}},
	{name: "slog handler", submit: postFailing, opts: func(first func() bool, how string) []seqsched.Option {
		h := &funcHandler{handle: func(context.Context, slog.Record) error {
			if first() {
				end(how)
			}
			return nil
		}}
		return []seqsched.Option{seqsched.WithLogger(slog.New(h))}
	}},
	{name: "submit ctx", submit: func(t *testing.T, s *seqsched.Scheduler[string], _ func() bool, how string) *seqsched.Future[struct{}] {
		f, err := s.Go(endingCtx{context.Background(), how}, "k", func(context.Context) error { return nil })
		require.NoError(t, err)
		return f
	}},
}

// endingCtx is a submit ctx whose Err leaves by one of the endings.
type endingCtx struct {
	context.Context
	how string
}

func (c endingCtx) Err() error { end(c.how); return nil }

// Whatever way a callback of any kind leaves, the guard tells the ending
// apart and the session goes on from where it was: the task at hand
// resolves, the key runs its next task, Shutdown returns and every
// goroutine is gone (goleak, in TestMain). A panic raised while a Goexit
// unwinds is the task's *PanicError; a Goexit from a panic's defers is
// ErrGoexit.
func TestEveryEndingOfEveryCallbackLosesNothing(t *testing.T) {
	for _, cb := range everyCallback {
		for _, how := range endings {
			t.Run(cb.name+"/"+how, func(t *testing.T) {
				var calls atomic.Int64
				first := func() bool { return calls.Add(1) == 1 }
				var opts []seqsched.Option
				if cb.opts != nil {
					opts = cb.opts(first, how)
				}
				if cb.name != "slog handler" {
					opts = append(opts, seqsched.WithLogger(slog.New(slog.DiscardHandler)))
				}
				s, err := seqsched.New[string](opts...)
				require.NoError(t, err)
				f := cb.submit(t, s, first, how)
				var ran recorder
				next := record(t, s, &ran, "k", "next")
				within(t, 10*time.Second, "the next task of the key", func() {
					if f != nil {
						_, err = f.Await(context.Background())
					}
					_, _ = next.Await(context.Background())
				})
				if cb.name == "fn" || cb.name == "interceptor" || cb.name == "submit ctx" {
					requireEndedBy(t, err, how)
				} else if f != nil {
					require.NoError(t, err)
				}
				require.Equal(t, []string{"next"}, ran.get())
				within(t, 10*time.Second, "Shutdown", func() { shutdownClean(t, s) })
			})
		}
	}
}

// Shutdown's record that it waits on paused keys is written on a goroutine
// of its own, which holds a live token: whatever way the log handler
// leaves, the record is dropped, the token is given back, and Shutdown
// returns nil once the paused key is resumed and its task has run.
func TestShutdownsWarnSurvivesEveryEndingOfTheLogHandler(t *testing.T) {
	for _, how := range endings {
		t.Run(how, func(t *testing.T) {
			called := make(chan struct{})
			var once sync.Once
			h := &funcHandler{handle: func(_ context.Context, rec slog.Record) error {
				if strings.HasPrefix(rec.Message, "seqsched: Shutdown waits") {
					once.Do(func() { close(called) })
					end(how)
				}
				return nil
			}}
			s, err := seqsched.New[string](seqsched.WithLogger(slog.New(h)))
			require.NoError(t, err)
			require.NoError(t, s.Pause("k"))
			var ran recorder
			f := record(t, s, &ran, "k", "paused")
			done := make(chan error, 1)
			go func() { done <- s.Shutdown(context.Background()) }()
			within(t, 10*time.Second, "the log handler's call", func() { <-called })
			require.NoError(t, s.Resume("k"))
			within(t, 10*time.Second, "Shutdown", func() { require.NoError(t, <-done) })
			awaitAll(t, f)
			require.Equal(t, []string{"paused"}, ran.get())
			shutdownClean(t, s)
		})
	}
}

// An interceptor's deferred call that panics or calls runtime.Goexit while
// fn's own Goexit or panic unwinds through it (the issue 50 case: fn
// Goexits, and the interceptor panics in a defer) decides the task's
// outcome, as Go decides which ending goes on: a panic is the task's
// *PanicError, a Goexit is ErrGoexit. The key runs its next task, and
// Shutdown returns with nothing left.
func TestAnInterceptorEndingWhileFnUnwindsDecidesTheTasksOutcome(t *testing.T) {
	for _, c := range []struct{ fn, icept string }{
		{"goexit", "panic"},
		{"goexit", "goexit"},
		{"panic", "panic"},
		{"panic", "goexit"},
	} {
		t.Run("fn "+c.fn+", interceptor "+c.icept, func(t *testing.T) {
			s, err := seqsched.New[string](seqsched.WithLogger(slog.New(slog.DiscardHandler)),
				seqsched.WithInterceptor(func(ctx context.Context, _ string, next func(context.Context) error) error {
					if ctx.Value(ctxKey("end")) != nil {
						defer func() {
							if c.icept == "panic" {
								panic("interceptor")
							}
							runtime.Goexit()
						}()
					}
					return next(ctx)
				}))
			require.NoError(t, err)
			f, err := s.Go(context.WithValue(context.Background(), ctxKey("end"), true), "k", func(context.Context) error {
				if c.fn == "panic" {
					panic("fn")
				}
				runtime.Goexit()
				return nil
			})
			require.NoError(t, err)
			var ran recorder
			next := record(t, s, &ran, "k", "next")
			within(t, 10*time.Second, "the task and the next of its key", func() {
				_, err = f.Await(context.Background())
				awaitAll(t, next)
			})
			if c.icept == "panic" {
				var perr *seqsched.PanicError
				require.ErrorAs(t, err, &perr)
				require.Equal(t, "interceptor", perr.Value)
			} else {
				require.ErrorIs(t, err, seqsched.ErrGoexit)
			}
			require.Equal(t, []string{"next"}, ran.get())
			within(t, 10*time.Second, "Shutdown", func() { shutdownClean(t, s) })
		})
	}
}

// Tasks queued behind a running one that panic, call runtime.Goexit, panic
// while a Goexit unwinds or call Goexit while a panic unwinds fail only
// themselves: the two after the running one each resolve as end says, and
// the rest still run, in order, however many tasks the worker had taken off
// the lane, in its first turn or its second.
func TestPanicAndGoexitInABacklogFailOnlyTheirTasks(t *testing.T) {
	for _, at := range backlogGates {
		for _, how := range endings {
			t.Run(fmt.Sprintf("t%d/%s", at, how), func(t *testing.T) {
				s := newScheduler[string](t)
				b := queueBacklogAt(t, s, "k", at, func(_ context.Context, i int) error {
					if i == at+1 || i == at+2 {
						end(how)
					}
					return nil
				}, nil)
				b.release()
				for _, i := range []int{at + 1, at + 2} {
					_, err := b.fs[i-1].Await(context.Background())
					requireEndedBy(t, err, how, "t%d's future", i)
				}
				awaitAll(t, append(b.fs[:at:at], b.fs[at+2:]...)...)
				require.Equal(t, names(1, backlogLen), b.r.get())
				st := s.Stats()
				require.Equal(t, uint64(2), st.Panics)
				require.Equal(t, seqsched.Outcomes{Succeeded: backlogLen - 1, Panicked: 2}, st.Normal.Outcomes)
				require.Zero(t, st.Sessions)
			})
		}
	}
}
