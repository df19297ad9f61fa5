package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Session handles (Open) and fire-and-forget tasks (Post).

func TestHandleAndKeyJoinTheSameFIFOs(t *testing.T) {
	s := newScheduler[string](t)
	h, err := s.Open("a")
	require.NoError(t, err)
	require.Equal(t, "a", h.Key())
	release, g := gate(t, s, "a")
	var r recorder
	add := func(name string) func(context.Context) error {
		return func(context.Context) error { r.add("%s", name); return nil }
	}
	f1, err := h.Go(context.Background(), add("h1"))
	require.NoError(t, err)
	f2, err := s.Go(context.Background(), "a", add("k2"))
	require.NoError(t, err)
	require.NoError(t, h.Post(context.Background(), add("p3")))
	require.NoError(t, s.Post(context.Background(), "a", add("kp4")))
	f5, err := seqsched.SubmitTo(context.Background(), h, func(context.Context) (int, error) { r.add("s5"); return 5, nil })
	require.NoError(t, err)
	f6, err := h.Go(context.Background(), add("H6"), seqsched.High)
	require.NoError(t, err)
	high, normal := h.Queued()
	require.Equal(t, [2]int{1, 5}, [2]int{high, normal}, "the running gate is not counted")
	high, normal = s.Queued("a")
	require.Equal(t, [2]int{1, 5}, [2]int{high, normal})
	release()
	awaitAll(t, g, f1, f2, f6)
	v, err := f5.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, 5, v)
	require.NoError(t, h.Close(context.Background()))
	require.Equal(t, []string{"H6", "h1", "k2", "p3", "kp4", "s5"}, r.get())
	high, normal = h.Queued()
	require.Zero(t, high+normal)
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

func TestHandlesAreCountedAndTheLastCloseDrains(t *testing.T) {
	s := newScheduler[string](t)
	h1, err := s.Open("a")
	require.NoError(t, err)
	h2, err := s.Open("a") // a second handle: the same session
	require.NoError(t, err)
	release, g := gate(t, s, "a")
	var r recorder
	for i := range 3 {
		require.NoError(t, h2.Post(context.Background(), func(context.Context) error { r.add("t%d", i); return nil }))
	}
	// Closing one handle releases only that handle, at once.
	require.NoError(t, h1.Close(context.Background()))
	err = h1.Post(context.Background(), func(context.Context) error { return nil })
	var serr *seqsched.SessionError
	require.ErrorAs(t, err, &serr)
	require.ErrorIs(t, err, seqsched.ErrSessionClosing)
	require.Equal(t, `seqsched: session "a": closing`, err.Error(), "the error names the key")
	require.NoError(t, h2.Post(context.Background(), func(context.Context) error { r.add("t3"); return nil }),
		"the other handle is still open")
	_, err = s.Go(context.Background(), "a", func(context.Context) error { return nil })
	require.NoError(t, err, "the session is not closing")

	// The last handle's Close drains.
	closed := make(chan error, 1)
	go func() { closed <- h2.Close(context.Background()) }()
	require.Eventually(t, func() bool {
		_, err := s.Go(context.Background(), "a", func(context.Context) error { return nil })
		return errors.Is(err, seqsched.ErrSessionClosing)
	}, 10e9, 1e6)
	release()
	require.NoError(t, <-closed)
	awaitAll(t, g)
	require.Equal(t, []string{"t0", "t1", "t2", "t3"}, r.get(), "accepted tasks ran before the last Close returned")
	for _, h := range []*seqsched.Session[string]{h1, h2} {
		_, err = h.Go(context.Background(), func(context.Context) error { return nil })
		require.ErrorIs(t, err, seqsched.ErrSessionClosing)
		require.NoError(t, h.Close(context.Background()), "Close of a closed handle")
	}
	// The key is fresh.
	h3, err := s.Open("a")
	require.NoError(t, err)
	awaitAll(t, record(t, s, &r, "a", "fresh"))
	require.NoError(t, h3.Close(context.Background()))
}

func TestRemoveClosesTheKeysHandles(t *testing.T) {
	s := newScheduler[string](t)
	h, err := s.Open("a")
	require.NoError(t, err)
	require.NoError(t, s.Remove(context.Background(), "a")) // idle and pinned
	_, err = h.Go(context.Background(), func(context.Context) error { return nil })
	require.ErrorIs(t, err, seqsched.ErrSessionClosing)

	h, err = s.Open("a")
	require.NoError(t, err)
	release, g := gate(t, s, "a")
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(context.Background(), "a") }()
	require.Eventually(t, func() bool {
		return errors.Is(h.Post(context.Background(), func(context.Context) error { return nil }), seqsched.ErrSessionClosing)
	}, 10e9, 1e6)
	release()
	require.NoError(t, <-removed)
	awaitAll(t, g)
}

func TestOpenRefusesBadKeysAndClosedScheduler(t *testing.T) {
	s, err := seqsched.New[float64]()
	require.NoError(t, err)
	_, err = s.Open(0 / zero())
	require.ErrorIs(t, err, seqsched.ErrInvalidKey)
	require.ErrorIs(t, s.Post(context.Background(), 0/zero(), func(context.Context) error { return nil }), seqsched.ErrInvalidKey)
	require.NoError(t, s.Shutdown(context.Background()))
	_, err = s.Open(1)
	require.ErrorIs(t, err, seqsched.ErrClosed)
}

func zero() float64 { return 0 }

func TestHandleAfterShutdownReturnsErrClosed(t *testing.T) {
	s, err := seqsched.New[int]()
	require.NoError(t, err)
	h, err := s.Open(1)
	require.NoError(t, err)
	require.NoError(t, s.Shutdown(context.Background()))
	_, err = h.Go(context.Background(), func(context.Context) error { return nil })
	require.ErrorIs(t, err, seqsched.ErrClosed)
	require.ErrorIs(t, h.Post(context.Background(), func(context.Context) error { return nil }), seqsched.ErrClosed)
	require.ErrorIs(t, h.Post(context.Background(), nil), seqsched.ErrNilFunc)
	require.ErrorIs(t, h.Post(nil, func(context.Context) error { return nil }), seqsched.ErrNilContext) //nolint:staticcheck // nil ctx on purpose
}

// failures collects what WithErrorHandler is given.
type failures struct {
	mu   sync.Mutex
	errs map[string][]error
}

func (f *failures) handle(_ context.Context, key string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.errs == nil {
		f.errs = map[string][]error{}
	}
	f.errs[key] = append(f.errs[key], err)
}

func (f *failures) get(key string) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.errs[key]...)
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

func TestPostDroppedByForcedShutdownIsReported(t *testing.T) {
	var fl failures
	s, err := seqsched.New[string](seqsched.WithErrorHandler(fl.handle))
	require.NoError(t, err)
	started := make(chan struct{})
	require.NoError(t, s.Post(context.Background(), "a", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}))
	<-started
	require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Shutdown(ctx), context.Canceled)
	require.NoError(t, s.Shutdown(context.Background()))
	errs := fl.get("a")
	require.Len(t, errs, 2)
	require.ElementsMatch(t, []error{context.Canceled, seqsched.ErrClosed}, errs)
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

func TestErrorHandlerThatPanicsOrGoexits(t *testing.T) {
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

func TestWithErrorHandlerOfAnotherKeyTypeIsRefused(t *testing.T) {
	_, err := seqsched.New[int](seqsched.WithErrorHandler(func(context.Context, string, error) {}))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
	_, err = seqsched.New[int](seqsched.WithErrorHandler[int](nil))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
}

// A posted task's ctx keeps the context contract, and the deadlock guard
// knows it.
func TestPostedTaskCtx(t *testing.T) {
	var fl failures
	s := newScheduler[string](t, seqsched.WithErrorHandler(fl.handle))
	parent := context.WithValue(context.Background(), ctxProbeKey{}, "probe")
	kept := make(chan context.Context, 1)
	require.NoError(t, s.Post(parent, "a", func(ctx context.Context) error {
		defer func() { kept <- ctx }()
		if v := ctxViolations(ctx, "probe"); v != nil {
			return errors.New(strings.Join(v, "; "))
		}
		f, err := s.Go(ctx, "a", func(context.Context) error { return nil })
		if err != nil {
			return err
		}
		if _, err := f.Await(ctx); !errors.Is(err, seqsched.ErrWouldDeadlock) {
			return fmt.Errorf("Await of own session = %v", err)
		}
		return nil
	}))
	ctx := <-kept
	require.NoError(t, s.Remove(context.Background(), "a"))
	require.Empty(t, fl.get("a"))
	require.ErrorIs(t, ctx.Err(), context.Canceled, "done once the task is over")
	require.Empty(t, ctxViolations(ctx, "probe"))
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
