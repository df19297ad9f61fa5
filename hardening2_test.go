package seqsched_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// The second hardening (RELIABILITY.md, "Hardening 2"): each test here
// failed, hung or crashed the process on the code before it. A hang is
// turned into a failure by within, which gives up after a bound far above
// what the call needs.

// within runs f on its own goroutine and fails t if it has not returned
// after d. The goroutine is left behind on failure (the test fails anyway).
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// closedWithin fails t unless ch is closed within d.
func closedWithin(t *testing.T, d time.Duration, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not closed within %v", what, d)
	}
}

// Item 1: an error handler that calls runtime.Goexit on a forced
// Shutdown's ErrClosed must lose no wake-up: every future closes its Done,
// the key waiting for the slot included, and a later Shutdown returns nil.
func TestErrorHandlerGoexitDuringForcedShutdownLosesNothing(t *testing.T) {
	handler := func(_ string, err error) {
		if errors.Is(err, seqsched.ErrClosed) {
			runtime.Goexit()
		}
	}
	s, err := seqsched.New[string](seqsched.WithMaxConcurrency(1), seqsched.WithErrorHandler(handler))
	require.NoError(t, err)
	stuck := make(chan struct{})
	started := make(chan struct{})
	hung, err := s.Go(context.Background(), "a", func(context.Context) error {
		close(started)
		<-stuck // ignores its ctx
		return nil
	})
	require.NoError(t, err)
	<-started
	for range 3 {
		require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return nil }))
	}
	var fs []*seqsched.Future[struct{}]
	for _, key := range []string{"a", "a", "b", "b"} { // b waits for the slot
		f, err := s.Go(context.Background(), key, func(context.Context) error { return nil })
		require.NoError(t, err)
		fs = append(fs, f)
		require.NoError(t, s.Post(context.Background(), key, func(context.Context) error { return nil }))
	}
	forced := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		forced <- s.Shutdown(ctx)
	}()
	require.ErrorIs(t, <-forced, context.Canceled)
	for i, f := range fs {
		closedWithin(t, 3*time.Second, "Done of a dropped future", f.Done())
		_, err := f.Await(context.Background())
		require.ErrorIs(t, err, seqsched.ErrClosed, "future %d", i)
	}
	close(stuck)
	awaitAll(t, hung)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx), "a later Shutdown returns nil")
}

// Item 2: an error handler that removes its own key, closes its own
// handle, or shuts the scheduler down must not wait for the worker it
// runs on: the call does its work and returns ErrWouldDeadlock.
func TestErrorHandlerCallingRemoveCloseOrShutdownOnItself(t *testing.T) {
	for _, call := range []string{"Remove", "Close", "Shutdown"} {
		t.Run(call, func(t *testing.T) {
			got := make(chan error, 1)
			var s *seqsched.Scheduler[string]
			var h *seqsched.Session[string]
			handler := func(key string, _ error) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				switch call {
				case "Remove":
					got <- s.Remove(ctx, key)
				case "Close":
					got <- h.Close(ctx)
				case "Shutdown":
					got <- s.Shutdown(ctx)
				}
			}
			var err error
			s, err = seqsched.New[string](seqsched.WithErrorHandler(handler))
			require.NoError(t, err)
			h, err = s.Open("a")
			require.NoError(t, err)
			var ran atomic.Int32
			gate := make(chan struct{}) // the second Post is accepted before the handler ends the session
			require.NoError(t, h.Post(context.Background(), func(context.Context) error { <-gate; return errors.New("boom") }))
			require.NoError(t, h.Post(context.Background(), func(context.Context) error { ran.Add(1); return nil }))
			close(gate)
			select {
			case err := <-got:
				require.ErrorIs(t, err, seqsched.ErrWouldDeadlock)
			case <-time.After(4 * time.Second):
				t.Fatalf("%s from the error handler waits for its own worker", call)
			}
			within(t, 5*time.Second, "Shutdown", func() { require.NoError(t, s.Shutdown(context.Background())) })
			require.Equal(t, int32(1), ran.Load(), "the work the call began completed: the accepted task ran")
		})
	}
}

// valueCtx is a ctx whose Value panics, blocks until release is closed,
// or calls back into the scheduler.
type valueCtx struct {
	context.Context
	how     string
	release chan struct{}
	s       *seqsched.Scheduler[string]
}

func (c valueCtx) Value(key any) any {
	switch c.how {
	case "panic":
		panic("Value panicked")
	case "block":
		<-c.release
	case "callback":
		_ = c.s.Stats()
		_, _ = c.s.Queued("a")
	}
	return c.Context.Value(key)
}

// Item 3: a ctx whose Value panics, blocks or calls back, passed to Remove
// or Close on a busy key, must not wedge the shard: Stats and Shutdown go
// on working.
func TestRemoveOrCloseWithHostileCtxValueKeepsTheShardUsable(t *testing.T) {
	for _, how := range []string{"panic", "block", "callback"} {
		for _, call := range []string{"Remove", "Close"} {
			t.Run(how+"/"+call, func(t *testing.T) {
				s, err := seqsched.New[string](seqsched.WithShards(1))
				require.NoError(t, err)
				h, err := s.Open("a")
				require.NoError(t, err)
				release, g := gate(t, s, "a")
				ctx := valueCtx{Context: context.Background(), how: how, release: make(chan struct{}), s: s}
				returned := make(chan error, 1)
				go func() {
					defer func() {
						if r := recover(); r != nil {
							returned <- errors.New("panicked")
						}
					}()
					if call == "Remove" {
						returned <- s.Remove(ctx, "a")
					} else {
						returned <- h.Close(ctx)
					}
				}()
				if how == "panic" {
					var perr *seqsched.PanicError
					err := <-returned
					require.ErrorAs(t, err, &perr, "a panicking ctx is bad input: an error, not a panic")
				}
				within(t, 3*time.Second, "Stats", func() { _ = s.Stats() })
				within(t, 3*time.Second, "Submit to the shard", func() {
					_, err := s.Go(context.Background(), "b", func(context.Context) error { return nil })
					require.NoError(t, err)
				})
				close(ctx.release)
				release()
				awaitAll(t, g)
				ctx2, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				require.NoError(t, s.Shutdown(ctx2), "Shutdown with a deadline returns nil")
				if how != "panic" {
					require.NoError(t, <-returned)
				}
			})
		}
	}
}

// Item 4: Stats.Panics counts fn's panics, whatever the error handler
// does: a posted task whose fn panicked counts 1, one skipped because its
// ctx ended counts 0.
func TestPanicsCountWhenTheErrorHandlerGoexits(t *testing.T) {
	goexit := seqsched.WithErrorHandler(func(string, error) { runtime.Goexit() })
	s := newScheduler[string](t, goexit)
	require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { panic("oops") }))
	require.NoError(t, s.Remove(context.Background(), "a"))
	st := s.Stats()
	require.Equal(t, [2]uint64{1, 0}, [2]uint64{st.Panics, st.Skipped}, "Panics, Skipped of a post whose fn panicked")

	s = newScheduler[string](t, goexit)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, s.Post(canceled, "b", func(context.Context) error { return nil }))
	require.NoError(t, s.Remove(context.Background(), "b"))
	st = s.Stats()
	require.Equal(t, [2]uint64{0, 1}, [2]uint64{st.Panics, st.Skipped}, "Panics, Skipped of a post whose ctx ended")
}

// Item 5: when Remove returns nil every accepted task has run; after a
// forced Shutdown dropped a queued task, it must not.
func TestRemoveAfterForcedShutdownDoesNotClaimEveryTaskRan(t *testing.T) {
	s, err := seqsched.New[string]()
	require.NoError(t, err)
	stuck := make(chan struct{})
	started := make(chan struct{})
	hung, err := s.Go(context.Background(), "a", func(context.Context) error {
		close(started)
		<-stuck
		return nil
	})
	require.NoError(t, err)
	<-started
	dropped, err := s.Go(context.Background(), "a", func(context.Context) error { return nil })
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Shutdown(ctx), context.Canceled)
	_, err = dropped.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrClosed)
	close(stuck)
	awaitAll(t, hung)
	require.ErrorIs(t, s.Remove(context.Background(), "a"), seqsched.ErrClosed)
	require.NoError(t, s.Shutdown(context.Background()))
}

// Item 6: a forced Shutdown returns at its ctx's end whatever the error
// handler does with the failures of the posts it dropped (they are
// reported on a goroutine of the scheduler), and a later Shutdown that
// returns nil finds every one reported.
func TestForcedShutdownReportsDroppedPostsWithoutWaitingForTheHandler(t *testing.T) {
	for round := range 50 {
		gate := make(chan struct{})
		var reported atomic.Int32
		s, err := seqsched.New[int](seqsched.WithErrorHandler(func(int, error) {
			<-gate // a handler that blocks
			reported.Add(1)
		}))
		require.NoError(t, err)
		stuck := make(chan struct{})
		var hung []*seqsched.Future[struct{}]
		for key := range 4 {
			started := make(chan struct{})
			f, err := s.Go(context.Background(), key, func(context.Context) error {
				close(started)
				<-stuck
				return nil
			})
			require.NoError(t, err)
			<-started
			hung = append(hung, f)
			for range 5 {
				require.NoError(t, s.Post(context.Background(), key, func(context.Context) error { return nil }))
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		within(t, 3*time.Second, "forced Shutdown", func() {
			require.ErrorIs(t, s.Shutdown(ctx), context.Canceled)
		})
		close(gate)
		close(stuck)
		awaitAll(t, hung...)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, int32(20), reported.Load(), "round %d: every dropped post reported", round)
	}
}

// Item 7: under WithMaxConcurrency(1), a task that closes or removes
// another busy session with its own ctx lends its slot while it waits, as
// Await does.
func TestRemoveOrCloseOfAnotherSessionFromATaskLendsTheSlot(t *testing.T) {
	for _, call := range []string{"Remove", "Close"} {
		t.Run(call, func(t *testing.T) {
			s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
			h, err := s.Open("b")
			require.NoError(t, err)
			var r recorder
			started := make(chan struct{})
			a, err := s.Go(context.Background(), "a", func(ctx context.Context) error {
				close(started)
				ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				if call == "Remove" {
					return s.Remove(ctx, "b")
				}
				return h.Close(ctx)
			})
			require.NoError(t, err)
			<-started
			awaitAll(t, record(t, s, &r, "b", "b1")) // queued behind a's slot... or already run
			_, err = a.Await(context.Background())
			require.NoError(t, err, "the wait ended: b ran on the lent slot")
			require.Equal(t, []string{"b1"}, r.get())
		})
	}
}

// Item 7, the busy case: b is queued behind the slot a holds when a waits
// for b's drain.
func TestRemoveOfABusySessionFromATaskUnderLimitOne(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	var r recorder
	gateA := make(chan struct{})
	a, err := s.Go(context.Background(), "a", func(ctx context.Context) error {
		<-gateA
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return s.Remove(ctx, "b")
	})
	require.NoError(t, err)
	b := record(t, s, &r, "b", "b1") // waits for the slot a holds
	close(gateA)
	_, err = a.Await(context.Background())
	require.NoError(t, err, "Remove of b lent a's slot and b drained")
	awaitAll(t, b)
	require.Equal(t, []string{"b1"}, r.get())
}

// armedCtx is a submit ctx whose Done and Value panic once armed, after
// the task ended.
type armedCtx struct {
	context.Context
	armed *atomic.Bool
}

func (c armedCtx) Done() <-chan struct{} {
	if c.armed.Load() {
		panic("Done panicked")
	}
	return c.Context.Done()
}

func (c armedCtx) Value(key any) any {
	if c.armed.Load() {
		panic("Value panicked")
	}
	return c.Context.Value(key)
}

// Item 8: a submit ctx whose methods panic after the task ended must not
// crash the process when the scheduler stops watching it.
func TestSubmitCtxPanickingAfterTheTaskEndedDoesNotCrash(t *testing.T) {
	inChild(t, func(t *testing.T) {
		s := newScheduler[string](t)
		parent, cancel := context.WithCancel(context.Background())
		defer cancel()
		var armed atomic.Bool
		ctx := armedCtx{Context: parent, armed: &armed}
		g, err := s.Go(ctx, "b", func(tctx context.Context) error {
			select {
			case <-tctx.Done():
			default:
			}
			armed.Store(true) // from now on the submit ctx panics
			return nil
		})
		require.NoError(t, err)
		awaitAll(t, g)
		cancel() // also cancels the watch on the parent
		f2, err := s.Go(context.Background(), "b", func(context.Context) error { return nil })
		require.NoError(t, err)
		awaitAll(t, f2)
		require.NoError(t, s.Remove(context.Background(), "b"))
	})
}

// brokenCtx is done (its Done closed) while its Err is nil.
type brokenCtx struct{ context.Context }

var closedCh = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

func (brokenCtx) Done() <-chan struct{} { return closedCh }
func (brokenCtx) Err() error            { return nil }

// Item 9: a submit ctx whose Done is closed while Err is nil counts as
// canceled: the task's ctx keeps the contract, and its Done does not
// panic.
func TestSubmitCtxDoneWithoutErrCountsAsCanceled(t *testing.T) {
	s := newScheduler[string](t)
	f, err := s.Go(brokenCtx{context.Background()}, "a", func(ctx context.Context) error {
		<-ctx.Done()
		if ctx.Err() == nil {
			return errors.New("Done closed with a nil Err")
		}
		return nil
	})
	require.NoError(t, err)
	_, err = f.Await(context.Background())
	require.NoError(t, err)
}

// Item 10: a zero Session and a nil *Session are bad input: an error,
// never a panic.
func TestZeroAndNilSessionAreErrorsNotPanics(t *testing.T) {
	var zero seqsched.Session[string]
	var none *seqsched.Session[string]
	for name, h := range map[string]*seqsched.Session[string]{"zero": &zero, "nil": none} {
		noPanic(t, name+" Queued", func() { h.Queued() })
		noPanic(t, name+" Key", func() { h.Key() })
		noPanic(t, name+" Close", func() {
			require.ErrorIs(t, h.Close(context.Background()), seqsched.ErrNotNew)
		})
		noPanic(t, name+" Go", func() {
			_, err := h.Go(context.Background(), func(context.Context) error { return nil })
			require.ErrorIs(t, err, seqsched.ErrNotNew)
		})
		noPanic(t, name+" Post", func() {
			require.ErrorIs(t, h.Post(context.Background(), func(context.Context) error { return nil }), seqsched.ErrNotNew)
		})
		noPanic(t, name+" SubmitTo", func() {
			_, err := seqsched.SubmitTo(context.Background(), h, func(context.Context) (int, error) { return 0, nil })
			require.ErrorIs(t, err, seqsched.ErrNotNew)
		})
		noPanic(t, name+" Discard", func() {
			require.ErrorIs(t, h.Discard(context.Background()), seqsched.ErrNotNew)
		})
	}
}

// Item 11: a closed handle returns ErrSessionClosing whatever the state of
// the scheduler, after Shutdown too.
func TestClosedHandleAfterShutdownReturnsSessionClosing(t *testing.T) {
	s, err := seqsched.New[string]()
	require.NoError(t, err)
	h, err := s.Open("a")
	require.NoError(t, err)
	require.NoError(t, h.Close(context.Background()))
	require.NoError(t, s.Shutdown(context.Background()))
	_, err = h.Go(context.Background(), func(context.Context) error { return nil })
	require.ErrorIs(t, err, seqsched.ErrSessionClosing)
	require.ErrorIs(t, h.Post(context.Background(), func(context.Context) error { return nil }), seqsched.ErrSessionClosing)

	// An open handle of a closed scheduler refuses with ErrClosed.
	s2, err := seqsched.New[string]()
	require.NoError(t, err)
	h2, err := s2.Open("a")
	require.NoError(t, err)
	require.NoError(t, s2.Shutdown(context.Background()))
	require.ErrorIs(t, h2.Post(context.Background(), func(context.Context) error { return nil }), seqsched.ErrClosed)
}

// Item 12: a task that calls runtime.Goexit is taken over on a fresh
// goroutine; what runs there must hold a live token, so that Shutdown
// never returns nil while a task still runs. Every task records its end;
// nothing may run after Shutdown returned nil.
func TestNoTaskRunsAfterShutdownReturnsNilWithGoexits(t *testing.T) {
	for round := range 200 {
		s, err := seqsched.New[int](seqsched.WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		var mu sync.Mutex
		over := false
		late := 0
		for key := range 4 {
			for i := range 20 {
				_, err := s.Go(context.Background(), key, func(context.Context) error {
					mu.Lock()
					if over {
						late++
					}
					mu.Unlock()
					if i%3 == 0 {
						runtime.Goexit()
					}
					return nil
				})
				require.NoError(t, err)
			}
		}
		require.NoError(t, s.Shutdown(context.Background()))
		mu.Lock()
		over = true
		mu.Unlock()
		runtime.Gosched()
		mu.Lock()
		require.Zero(t, late, "round %d: a task ran after Shutdown returned nil", round)
		mu.Unlock()
	}
	require.Zero(t, seqsched.TokenViolations(), "a worker ran without a live token")
}

// sessionHandler records each record's message with its "session" attribute.
type sessionHandler struct {
	mu   sync.Mutex
	recs []string
}

func (h *sessionHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *sessionHandler) Handle(_ context.Context, r slog.Record) error {
	key := "<none>"
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "session" {
			key = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Message+" session="+key)
	return nil
}
func (h *sessionHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *sessionHandler) WithGroup(string) slog.Handler      { return h }

// A worker that reported a posted task's failure to the error handler, and
// had nothing to log, names the right session in what it logs next for
// another session: under WithMaxConcurrency(1) the worker of "a" goes on
// to "b" once "a" is idle, and b's panic is logged as b's.
func TestLogAfterAReportedPostNamesItsOwnSession(t *testing.T) {
	h := &sessionHandler{}
	var handled atomic.Int32
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1), seqsched.WithLogger(slog.New(h)),
		seqsched.WithErrorHandler(func(string, error) { handled.Add(1) }))
	gate := make(chan struct{})
	require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error {
		<-gate // b is queued for the slot before a's task fails
		return errors.New("a failed")
	}))
	f, err := seqsched.Submit(context.Background(), s, "b", func(context.Context) (int, error) { panic("b panicked") })
	require.NoError(t, err)
	close(gate)
	_, err = f.Await(context.Background())
	var perr *seqsched.PanicError
	require.ErrorAs(t, err, &perr)
	require.NoError(t, s.Shutdown(context.Background()))
	require.Equal(t, int32(1), handled.Load())
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Equal(t, []string{"seqsched: task panicked session=b"}, h.recs)
}
