// Re-entry: fn, the error handler and the logger may call every public
// operation, on their own session, another one, or the scheduler, with the
// ctx they were given; each completes or returns ErrWouldDeadlock, and no
// two callers wait for each other for ever. Under WithMaxConcurrency a
// task that waits (Await, Discard) lends its slot and takes it back before
// it runs on; after a forced Shutdown it runs on without one.

package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

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

func TestRemoveOwnSessionFromTaskReturnsErrWouldDeadlock(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	f, err := s.Go(context.Background(), "k", func(ctx context.Context) error {
		err := s.Remove(ctx, "k")
		_, submitErr := s.Go(ctx, "k", func(context.Context) error { return nil })
		r.add("remove: %v; submit: %v", err, submitErr)
		return nil
	})
	require.NoError(t, err)
	awaitAll(t, f)
	require.Equal(t, []string{`remove: seqsched: would deadlock; submit: seqsched: session "k": closing`}, r.get())
	awaitAll(t, record(t, s, &r, "k", "fresh"))
}

func TestDiscardFromItsOwnTaskDiscardsAndReturnsErrWouldDeadlock(t *testing.T) {
	s := newScheduler[string](t)
	var ran recorder
	gateA := make(chan struct{})
	got := make(chan error, 1)
	a, err := s.Go(context.Background(), "a", func(ctx context.Context) error {
		<-gateA
		got <- s.Discard(ctx, "a") // its own ctx: the task is known by it
		if ctx.Err() == nil || !errors.Is(seqsched.Cause(ctx), seqsched.ErrDiscarded) {
			return fmt.Errorf("own ctx after Discard: %v, cause %v", ctx.Err(), seqsched.Cause(ctx))
		}
		return nil
	})
	require.NoError(t, err)
	queued := record(t, s, &ran, "a", "queued")
	close(gateA)
	require.ErrorIs(t, <-got, seqsched.ErrWouldDeadlock)
	awaitAll(t, a)
	_, err = queued.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrDiscarded)
	require.Empty(t, ran.get())
}

func TestDiscardFromTheErrorHandlerEndsAnotherSessionAndReturnsErrWouldDeadlockForItsOwn(t *testing.T) {
	got := make(chan error, 2)
	var s *seqsched.Scheduler[string]
	var once sync.Once
	s = newScheduler[string](t, seqsched.WithErrorHandler(func(ctx context.Context, key string, err error) {
		if key != "a" {
			return
		}
		once.Do(func() {
			got <- s.Discard(ctx, "b")
			got <- s.Discard(ctx, "a")
		})
	}))
	var ran recorder
	release, g := gate(t, s, "a")
	require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return errors.New("fail") }))
	queuedA := record(t, s, &ran, "a", "a queued")
	releaseB, gB := gate(t, s, "b")
	queuedB := record(t, s, &ran, "b", "b queued")
	releaseB()
	awaitAll(t, gB)
	release()
	awaitAll(t, g)
	require.NoError(t, <-got, "Discard of another session from the handler")
	require.ErrorIs(t, <-got, seqsched.ErrWouldDeadlock, "Discard of its own session from the handler")
	for _, f := range []*seqsched.Future[struct{}]{queuedA, queuedB} {
		_, err := f.Await(context.Background())
		if err != nil {
			require.ErrorIs(t, err, seqsched.ErrDiscarded)
		}
	}
	require.NotContains(t, ran.get(), "a queued")
}

// Discard resolves the posted tasks it drops with ErrDiscarded and reports
// their failures on the session's goroutine, which Discard (and so the
// session's drain) waits for. The error handler, or the logger without
// one, runs there; if it ends its own key (Remove, Close of the last
// handle, Discard) with the ctx it was given, that call must not wait for
// the goroutine it runs on: it returns ErrWouldDeadlock.
func TestCallbackReportingADiscardMayEndItsOwnKey(t *testing.T) {
	for _, from := range []string{"error handler", "logger"} {
		for _, call := range []string{"Remove", "Close", "Discard", "Discard through the handle"} {
			t.Run(from+"/"+call, func(t *testing.T) {
				endOwnKeyWhileReportingADiscard(t, from, call)
			})
		}
	}
}

func endOwnKeyWhileReportingADiscard(t *testing.T, from, call string) {
	var s *seqsched.Scheduler[string]
	var h *seqsched.Session[string]
	got := make(chan error, 1)
	var fired atomic.Bool
	react := func(ctx context.Context, key string) {
		if fired.Swap(true) {
			return
		}
		switch call {
		case "Remove":
			got <- s.Remove(ctx, key)
		case "Close":
			got <- h.Close(ctx)
		case "Discard":
			got <- s.Discard(ctx, key)
		case "Discard through the handle":
			got <- h.Discard(ctx)
		}
	}
	opts := []seqsched.Option{seqsched.WithLogger(slog.New(slog.DiscardHandler))}
	if from == "error handler" {
		opts = append(opts, seqsched.WithErrorHandler(func(ctx context.Context, key string, err error) {
			if errors.Is(err, seqsched.ErrDiscarded) {
				react(ctx, key)
			}
		}))
	} else {
		opts = append(opts, seqsched.WithLogger(slog.New(&funcHandler{handle: func(ctx context.Context, r slog.Record) error {
			if r.Message == "seqsched: posted task failed" {
				var key string
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "session" {
						key = fmt.Sprint(a.Value.Any())
					}
					return true
				})
				react(ctx, key)
			}
			return nil
		}})))
	}
	var err error
	s, err = seqsched.New[string](opts...)
	require.NoError(t, err)
	h, err = s.Open("a")
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	running, err := h.Go(context.Background(), func(context.Context) error {
		close(started)
		<-release // keeps the session from being forgotten while the reports go on
		return nil
	})
	require.NoError(t, err)
	<-started
	for range 3 {
		require.NoError(t, h.Post(context.Background(), func(context.Context) error { return nil }))
	}
	discarded := make(chan error, 1)
	go func() { discarded <- s.Discard(context.Background(), "a") }()
	// Discard drops the queue at once; the reports run on the session's
	// goroutine once its running task returns, and the callback ends its
	// own key with the ctx it was given.
	for {
		if _, n := s.Queued("a"); n == 0 {
			break
		}
		runtime.Gosched()
	}
	close(release)
	select {
	case err := <-got:
		if err != nil && !errors.Is(err, seqsched.ErrWouldDeadlock) {
			t.Fatalf("%s of its own key from the %s reporting a Discard = %v; want ErrWouldDeadlock (or nil)", call, from, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s from the %s did not return", call, from)
	}
	awaitAll(t, running)
	select {
	case err := <-discarded:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Discard did not return once its running task returned")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
}

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

// Two sessions of one key, each logging a dropped post, must not wait for
// each other: the first one's logger removes the key (the successor, which
// waits behind the first session), the second one's discards the first
// session. Given the ctx the logger was given, each call that would wait
// for its own caller answers ErrWouldDeadlock (or finds the session gone)
// rather than let both wait for ever.
func TestReportersOfOneKeyNeverWaitForEachOther(t *testing.T) {
	synctest.Test(t, reportersOfOneKey)
}

func reportersOfOneKey(t *testing.T) {
	var s *seqsched.Scheduler[string]
	var h1 *seqsched.Session[string]
	var errs [3]error
	var records atomic.Int32
	handler := &funcHandler{handle: func(ctx context.Context, r slog.Record) error {
		n := records.Add(1)
		if n > 2 {
			return nil
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if n == 1 {
			errs[n] = s.Remove(ctx, "k") // the successor's drain
		} else {
			errs[n] = h1.Discard(ctx) // the first session's drain
		}
		return nil
	}}
	var err error
	s, err = seqsched.New[string](seqsched.WithLogger(slog.New(handler)))
	require.NoError(t, err)
	ctx := context.Background()

	h1, err = s.Open("k")
	require.NoError(t, err)
	gate, started := make(chan struct{}), make(chan struct{})
	busy, err := h1.Go(ctx, func(context.Context) error { close(started); <-gate; return nil })
	require.NoError(t, err)
	<-started
	require.NoError(t, h1.Post(ctx, func(context.Context) error { return nil })) // dropped by the first Discard
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(ctx, "k") }() // the first session closes
	synctest.Wait()                               // Remove waits for it
	h2, err := s.Open("k")                        // a successor, held back behind the first session
	require.NoError(t, err)
	require.NoError(t, h2.Post(ctx, func(context.Context) error { return nil })) // dropped by the second Discard

	discarded := make(chan error, 2)
	go func() { discarded <- h1.Discard(ctx) }() // its report's logger removes the key
	go func() { discarded <- h2.Discard(ctx) }() // its report's logger discards the first session
	synctest.Wait()
	close(gate)
	_, err = busy.Await(ctx)
	require.NoError(t, err)
	require.NoError(t, <-removed)
	for range 2 {
		err := <-discarded
		require.True(t, err == nil || errors.Is(err, seqsched.ErrSessionClosing), "Discard = %v", err)
	}
	require.Equal(t, int32(2), records.Load(), "both dropped posts were logged")
	require.ErrorIs(t, errs[1], seqsched.ErrWouldDeadlock, "the first session's logger removing its own key's successor")
	require.ErrorIs(t, errs[2], seqsched.ErrSessionClosing, "the successor's logger discarding the first session, gone by then")
	require.NoError(t, s.Shutdown(ctx))
}

// chain submits on keys[0] a task that submits on keys[1] a task that ...
// awaits the next, and returns the outer future. runnable counts tasks that
// run outside an Await; peak records its maximum.
func chain(t testing.TB, s *seqsched.Scheduler[string], keys []string, runnable, peak *atomic.Int32) *seqsched.Future[string] {
	t.Helper()
	enter := func() {
		n := runnable.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
	}
	var link func(i int) func(context.Context) (string, error)
	link = func(i int) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			enter()
			defer runnable.Add(-1)
			if i == len(keys)-1 {
				return keys[i], nil
			}
			next, err := seqsched.Submit(ctx, s, keys[i+1], link(i+1))
			if err != nil {
				return "", err
			}
			runnable.Add(-1)
			v, err := next.Await(ctx)
			enter()
			return keys[i] + v, err
		}
	}
	f, err := seqsched.Submit(context.Background(), s, keys[0], link(0))
	require.NoError(t, err)
	return f
}

func TestAwaitChainCompletesUnderMaxConcurrencyOne(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	var runnable, peak atomic.Int32
	v, err := chain(t, s, []string{"A", "B", "C"}, &runnable, &peak).Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, "ABC", v)
	require.Equal(t, int32(1), peak.Load(), "more runnable tasks than slots")
}

func TestHundredAwaitChainsCompleteUnderMaxConcurrencyTwo(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(2))
	var runnable, peak atomic.Int32
	var fs []*seqsched.Future[string]
	for i := range 100 {
		keys := []string{fmt.Sprint("a", i%7), fmt.Sprint("b", i%5), fmt.Sprint("c", i%3)}
		fs = append(fs, chain(t, s, keys, &runnable, &peak))
	}
	for i, f := range fs {
		v, err := f.Await(context.Background())
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint("a", i%7, "b", i%5, "c", i%3), v)
	}
	require.LessOrEqual(t, peak.Load(), int32(2), "more runnable tasks than slots")
}

func TestAwaitingSessionRunsNoOtherTaskWhileItsSlotIsLent(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	var r recorder
	a1, err := s.Go(context.Background(), "A", func(ctx context.Context) error {
		r.add("a1 start")
		// Queued behind a1 on A: must not start while a1 awaits.
		if _, err := s.Go(ctx, "A", func(context.Context) error { r.add("a2"); return nil }); err != nil {
			return err
		}
		b, err := s.Go(ctx, "B", func(context.Context) error { r.add("b1"); return nil })
		if err != nil {
			return err
		}
		_, err = b.Await(ctx)
		r.add("a1 end")
		return err
	})
	require.NoError(t, err)
	awaitAll(t, a1)
	require.NoError(t, s.Remove(context.Background(), "A")) // a2 done too
	require.Equal(t, []string{"a1 start", "b1", "a1 end", "a2"}, r.get())
}

// backFromAwaitWhileSlotHeld, inside a synctest bubble, makes a scheduler
// with one slot where a1 (session A) awaits b1 (session B), and b2, queued
// on B behind b1, keeps B's turn and so the slot until open is closed. The
// sessions named in others each get a task, submitted before the Await, that
// waits behind B in the ready queue. It returns once a1 is back from its
// Await and waits for the slot; r records the tasks' events.
func backFromAwaitWhileSlotHeld(t *testing.T, r *recorder, open chan struct{}, others ...string) (*seqsched.Scheduler[string], *seqsched.Future[struct{}]) {
	t.Helper()
	s, err := seqsched.New[string](seqsched.WithMaxConcurrency(1))
	require.NoError(t, err)
	a1, err := s.Go(context.Background(), "A", func(ctx context.Context) error {
		r.add("a1 start")
		b1, err := s.Go(ctx, "B", func(context.Context) error { r.add("b1"); return nil })
		if err != nil {
			return err
		}
		if _, err := s.Go(ctx, "B", func(context.Context) error { <-open; r.add("b2"); return nil }); err != nil {
			return err
		}
		for _, key := range others {
			if _, err := s.Go(ctx, key, func(context.Context) error { r.add("%s", key); return nil }); err != nil {
				return err
			}
		}
		_, err = b1.Await(ctx)
		r.add("a1 end")
		return err
	})
	require.NoError(t, err)
	synctest.Wait()
	require.Equal(t, []string{"a1 start", "b1"}, r.get())
	return s, a1
}

func TestTaskBackFromAwaitGoesAheadOfWaitingSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		open := make(chan struct{})
		// C and D have not started: they wait behind B in the ready queue.
		s, a1 := backFromAwaitWhileSlotHeld(t, &r, open, "C", "D")
		close(open)
		awaitAll(t, a1)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, []string{"a1 start", "b1", "b2", "a1 end", "C", "D"}, r.get())
	})
}

// After a forced Shutdown nobody may hand a slot on (here B's task ignores
// its ctx), so a task back from an Await runs on without one rather than
// wait: two tasks then run under WithMaxConcurrency(1), as documented.
func TestForcedShutdownLetsTaskBackFromAwaitRunWithoutSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		open := make(chan struct{})
		s, a1 := backFromAwaitWhileSlotHeld(t, &r, open)

		gaveUp, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, s.Shutdown(gaveUp), context.Canceled)
		synctest.Wait() // a1 has finished; b2 still holds the slot
		require.Equal(t, []string{"a1 start", "b1", "a1 end"}, r.get())
		awaitAll(t, a1)

		close(open)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, []string{"a1 start", "b1", "a1 end", "b2"}, r.get())
	})
}

// An Await with the task's ctx may run on a goroutine of the task's own. If
// it is back from its wait, queued for a slot, when fn returns, it no longer
// needs one: it returns at once, and the worker takes the slot back itself.
func TestAwaitOnTasksOtherGoroutineReturnsWhenTaskEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[string](seqsched.WithMaxConcurrency(1))
		require.NoError(t, err)
		var r recorder
		open := make(chan struct{})   // b2 keeps B's turn, and so the slot, until then
		finish := make(chan struct{}) // a1's fn returns then
		awaited := make(chan error, 1)
		a1, err := s.Go(context.Background(), "A", func(ctx context.Context) error {
			b1, err := goRecorded(ctx, s, &r, "B", "b1", nil)
			if err != nil {
				return err
			}
			if _, err := goRecorded(ctx, s, &r, "B", "b2", open); err != nil {
				return err
			}
			go func() {
				_, err := b1.Await(ctx)
				r.add("await back")
				awaited <- err
			}()
			<-finish
			r.add("a1 end")
			return nil
		})
		require.NoError(t, err)
		synctest.Wait() // b1 has run; its Await waits for the slot b2 holds
		require.Equal(t, []string{"b1"}, r.get())

		close(finish)
		synctest.Wait() // a1's worker now waits for the slot
		require.Equal(t, []string{"b1", "a1 end", "await back"}, r.get())
		require.NoError(t, <-awaited)

		close(open)
		awaitAll(t, a1)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, []string{"b1", "a1 end", "await back", "b2"}, r.get())
	})
}

// goRecorded submits from a task, under its ctx, a task on key that waits
// for open (if not nil) and then records name.
func goRecorded(ctx context.Context, s *seqsched.Scheduler[string], r *recorder, key, name string, open <-chan struct{}) (*seqsched.Future[struct{}], error) {
	return s.Go(ctx, key, func(context.Context) error {
		if open != nil {
			<-open
		}
		r.add("%s", name)
		return nil
	})
}

// awaited is a future to await and the name it is recorded by.
type awaited struct {
	name string
	f    *seqsched.Future[struct{}]
}

// awaitBoth awaits first and second under ctx on two goroutines, the second
// once startSecond is closed (nil: at once), records "<name> awaited" as
// each returns and "a end" after both, and returns their errors.
func awaitBoth(ctx context.Context, r *recorder, first, second awaited, startSecond <-chan struct{}) error {
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, a := range []awaited{first, second} {
		if i == 1 && startSecond != nil {
			<-startSecond
		}
		wg.Go(func() { _, errs[i] = a.f.Await(ctx); r.add("%s awaited", a.name) })
	}
	wg.Wait()
	r.add("a end")
	return errors.Join(errs...)
}

// A task's slot stays lent while any of its Awaits is in progress. Here A's
// task awaits b1 and, once startSecond is closed, c1, on two goroutines.
// The first Await is back and waits to take the slot back (b2 holds B's
// turn, and the slot, until openB is closed) when the second begins: the
// first returns at once, the slot stays lent, and c1 gets it when B's turn
// ends. Were the slot taken back then, c1 could never run with one slot.
func TestSlotStaysLentWhileAnyAwaitOfTheTaskWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[string](seqsched.WithMaxConcurrency(1))
		require.NoError(t, err)
		var r recorder
		openB, startSecond := make(chan struct{}), make(chan struct{})
		a, err := s.Go(context.Background(), "A", func(ctx context.Context) error {
			b1, err := goRecorded(ctx, s, &r, "B", "b1", nil)
			if err != nil {
				return err
			}
			if _, err := goRecorded(ctx, s, &r, "B", "b2", openB); err != nil {
				return err
			}
			c1, err := goRecorded(ctx, s, &r, "C", "c1", nil)
			if err != nil {
				return err
			}
			return awaitBoth(ctx, &r, awaited{"b1", b1}, awaited{"c1", c1}, startSecond)
		})
		require.NoError(t, err)
		synctest.Wait() // b1 has run; its Await waits for the slot b2 holds
		require.Equal(t, []string{"b1"}, r.get())

		close(startSecond)
		synctest.Wait()
		require.Equal(t, []string{"b1", "b1 awaited"}, r.get())

		close(openB)
		awaitAll(t, a)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, []string{"b1", "b1 awaited", "b2", "c1", "c1 awaited", "a end"}, r.get())
	})
}

// Of two Awaits of one task that both lent the slot, the first back
// returns at once; the last takes the slot back. With one slot, C's task,
// which the other Await waits for, could never run otherwise.
func TestLastOfATasksAwaitsTakesTheSlotBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[string](seqsched.WithMaxConcurrency(1))
		require.NoError(t, err)
		var r recorder
		openB1, openC1 := make(chan struct{}), make(chan struct{})
		a, err := s.Go(context.Background(), "A", func(ctx context.Context) error {
			var fs []*seqsched.Future[struct{}]
			for _, key := range []string{"B", "C"} {
				open := openB1
				if key == "C" {
					open = openC1
				}
				f, err := s.Go(ctx, key, func(context.Context) error {
					r.add("%s start", key)
					<-open
					return nil
				})
				if err != nil {
					return err
				}
				fs = append(fs, f)
			}
			return awaitBoth(ctx, &r, awaited{"B", fs[0]}, awaited{"C", fs[1]}, nil)
		})
		require.NoError(t, err)
		synctest.Wait() // both Awaits lent the slot; B runs
		require.Equal(t, []string{"B start"}, r.get())
		close(openB1)
		synctest.Wait() // the first Await returned; C has the slot
		require.ElementsMatch(t, []string{"B start", "B awaited", "C start"}, r.get())
		close(openC1)
		awaitAll(t, a)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, []string{"C awaited", "a end"}, r.get()[3:])
	})
}

// However a task's Awaits overlap, it takes back one slot and gives back
// one. Here the second Await ends while the first still waits to take the
// slot back: B keeps the slot from b1 to b4, and X holds the other one.
// Afterwards both slots of WithMaxConcurrency(2) are free.
func TestOverlappingAwaitsOfOneTaskLeaveEverySlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[string](seqsched.WithMaxConcurrency(2))
		require.NoError(t, err)
		releaseX, x := gate(t, s, "X")
		var r recorder
		openB2, openB4, startSecond := make(chan struct{}), make(chan struct{}), make(chan struct{})
		a, err := s.Go(context.Background(), "A", func(ctx context.Context) error {
			var fs [4]*seqsched.Future[struct{}]
			for i, open := range []chan struct{}{nil, openB2, nil, openB4} {
				f, err := goRecorded(ctx, s, &r, "B", fmt.Sprint("b", i+1), open)
				if err != nil {
					return err
				}
				fs[i] = f
			}
			return awaitBoth(ctx, &r, awaited{"b1", fs[0]}, awaited{"b3", fs[2]}, startSecond)
		})
		require.NoError(t, err)
		synctest.Wait() // b1 has run; its Await waits for a slot (X and B hold them)
		close(startSecond)
		synctest.Wait()
		close(openB2)
		synctest.Wait() // b3 has run; its Await waits for a slot
		close(openB4)
		synctest.Wait()
		releaseX()
		awaitAll(t, a, x)
		require.Equal(t, []string{"b1", "b1 awaited", "b2", "b3", "b4", "b3 awaited", "a end"}, r.get())

		// Two sessions now run at once.
		open := make(chan struct{})
		var started atomic.Int32
		var fs []*seqsched.Future[struct{}]
		for _, key := range []string{"Y", "Z"} {
			f, err := s.Go(context.Background(), key, func(context.Context) error { started.Add(1); <-open; return nil })
			require.NoError(t, err)
			fs = append(fs, f)
		}
		synctest.Wait()
		require.Equal(t, int32(2), started.Load())
		close(open)
		awaitAll(t, fs...)
		require.NoError(t, s.Shutdown(context.Background()))
	})
}

func TestDiscardOfAnotherSessionFromATaskUnderLimitOneCompletes(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	var ran recorder
	gateA := make(chan struct{})
	bStarted := make(chan struct{})
	// b runs first and waits for its ctx; a waits for the slot b holds.
	b, err := s.Go(context.Background(), "b", func(ctx context.Context) error {
		close(bStarted)
		<-ctx.Done()
		return nil
	})
	require.NoError(t, err)
	<-bStarted
	queuedB := record(t, s, &ran, "b", "b queued")
	a, err := s.Go(context.Background(), "a", func(ctx context.Context) error {
		<-gateA
		return s.Discard(ctx, "b")
	})
	require.NoError(t, err)
	close(gateA)
	// a only gets the slot once b returns, which Discard makes it do; so
	// discard b from the test first, then check a's Discard of the now
	// fresh key completes.
	require.NoError(t, s.Discard(context.Background(), "b"))
	awaitAll(t, b, a)
	_, err = queuedB.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrDiscarded)
	require.Empty(t, ran.get())

	// Now the case the lending is for: a holds the slot and discards b,
	// which waits for it.
	gateA = make(chan struct{})
	a, err = s.Go(context.Background(), "a", func(ctx context.Context) error {
		<-gateA
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return s.Discard(ctx, "b")
	})
	require.NoError(t, err)
	queuedB = record(t, s, &ran, "b", "b waits for the slot")
	close(gateA)
	_, err = a.Await(context.Background())
	require.NoError(t, err, "Discard of a session waiting for the slot completes")
	_, err = queuedB.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrDiscarded)
	require.Empty(t, ran.get())
}

// Under WithMaxConcurrency(1), a task that discards a running session
// lends its slot while it waits: b lent its slot to an Await, a took it
// and discards b; b's task, its ctx canceled, returns and needs a slot to
// finish, which only a's Discard can lend. Without the lending, a's
// Discard waits out its 5 s and b never finishes.
func TestDiscardOfARunningSessionFromATaskUnderLimitOneLendsTheSlot(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	bRunning := make(chan struct{})
	await := make(chan *seqsched.Future[struct{}])
	b, err := s.Go(context.Background(), "b", func(ctx context.Context) error {
		close(bRunning)
		_, err := (<-await).Await(ctx) // lends b's slot; ends when Discard cancels ctx
		return err
	})
	require.NoError(t, err)
	<-bRunning
	a, err := s.Go(context.Background(), "a", func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return s.Discard(ctx, "b")
	})
	require.NoError(t, err)
	w, err := s.Go(context.Background(), "w", func(context.Context) error { return nil }) // behind a in the ready queue
	require.NoError(t, err)
	await <- w

	_, err = a.Await(context.Background())
	require.NoError(t, err, "a's Discard of the running b returns once b's task returned")
	// b's Await ends with its canceled ctx, or with w's result if w ran
	// (on the slot a's Discard lent) before it looked.
	if _, err = b.Await(context.Background()); err != nil {
		require.ErrorIs(t, err, context.Canceled)
	}
	_, err = w.Await(context.Background())
	require.NoError(t, err)
	high, normal := s.Queued("b")
	require.Zero(t, high+normal)
}
