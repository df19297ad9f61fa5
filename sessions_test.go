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
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// Sessions a server can control: Discard, counted handles, and failures
// that reach the process's log by default.

// discardSetup runs a task on "a" that waits for its ctx, queues High and
// Normal tasks behind it (by key, through a handle, and posted), and
// returns what the test needs to discard and check.
type discardSetup struct {
	s        *seqsched.Scheduler[string]
	h        *seqsched.Session[string]
	running  *seqsched.Future[struct{}]
	cause    chan error
	queued   []*seqsched.Future[struct{}]
	ran      recorder
	failures *failures
}

func setUpDiscard(t *testing.T, opts ...seqsched.Option) *discardSetup {
	t.Helper()
	d := &discardSetup{cause: make(chan error, 1), failures: &failures{}}
	d.s = newScheduler[string](t, append(opts, seqsched.WithErrorHandler(d.failures.handle))...)
	var err error
	d.h, err = d.s.Open("a")
	require.NoError(t, err)
	started := make(chan struct{})
	d.running, err = d.s.Go(context.Background(), "a", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		d.cause <- seqsched.Cause(ctx)
		return ctx.Err()
	})
	require.NoError(t, err)
	<-started
	for i, prio := range []seqsched.Priority{seqsched.High, seqsched.Normal, seqsched.High, seqsched.Normal} {
		name := fmt.Sprintf("q%d", i)
		f, err := d.s.Go(context.Background(), "a", func(context.Context) error { d.ran.add("%s", name); return nil }, prio)
		require.NoError(t, err)
		d.queued = append(d.queued, f)
		f, err = d.h.Go(context.Background(), func(context.Context) error { d.ran.add("h%s", name); return nil }, prio)
		require.NoError(t, err)
		d.queued = append(d.queued, f)
		require.NoError(t, d.h.Post(context.Background(), func(context.Context) error { d.ran.add("p%s", name); return nil }, prio))
	}
	return d
}

func (d *discardSetup) check(t *testing.T) {
	t.Helper()
	for i, f := range d.queued {
		_, err := f.Await(context.Background())
		require.ErrorIs(t, err, seqsched.ErrDiscarded, "queued future %d", i)
	}
	require.Empty(t, d.ran.get(), "nothing queued runs after Discard began")
	errs := d.failures.get("a")
	require.Len(t, errs, 4, "each discarded post is reported")
	for _, err := range errs {
		require.ErrorIs(t, err, seqsched.ErrDiscarded)
	}
	require.ErrorIs(t, <-d.cause, seqsched.ErrDiscarded, "the running task's ctx ends with ErrDiscarded as its cause")
	_, err := d.running.Await(context.Background())
	require.ErrorIs(t, err, context.Canceled)
	st := d.s.Stats()
	require.Equal(t, uint64(12), st.Discarded, "Discarded counts the discarded tasks")
	require.Zero(t, st.Skipped, "Skipped counts what Outcomes.Skipped does: none here")
	require.Equal(t, seqsched.Outcomes{Discarded: 6}, st.High.Outcomes)
	require.Equal(t, seqsched.Outcomes{Failed: 1, Discarded: 6}, st.Normal.Outcomes)
	require.Zero(t, st.Sessions, "the session is forgotten")
	_, err = d.h.Go(context.Background(), func(context.Context) error { return nil })
	require.ErrorIs(t, err, seqsched.ErrSessionClosing, "Discard closed the handle")
}

func TestDiscardDropsTheBacklogAndCancelsTheRunningTask(t *testing.T) {
	for _, by := range []string{"key", "handle"} {
		t.Run(by, func(t *testing.T) {
			d := setUpDiscard(t)
			var err error
			if by == "key" {
				err = d.s.Discard(context.Background(), "a")
			} else {
				err = d.h.Discard(context.Background())
			}
			require.NoError(t, err)
			d.check(t)
			f, err := d.s.Go(context.Background(), "a", func(context.Context) error { return nil })
			require.NoError(t, err, "the key is fresh after Discard returned")
			awaitAll(t, f)
		})
	}
}

func TestDiscardRefusesNewTasksAtOnce(t *testing.T) {
	s := newScheduler[string](t)
	h, err := s.Open("a")
	require.NoError(t, err)
	release := make(chan struct{})
	started := make(chan struct{})
	g, err := s.Go(context.Background(), "a", func(context.Context) error {
		close(started)
		<-release // ignores its ctx: Discard waits
		return nil
	})
	require.NoError(t, err)
	<-started
	returned := make(chan error, 1)
	go func() { returned <- s.Discard(context.Background(), "a") }()
	require.Eventually(t, func() bool {
		_, err := s.Go(context.Background(), "a", func(context.Context) error { return nil })
		return errors.Is(err, seqsched.ErrSessionClosing)
	}, 10*time.Second, time.Millisecond)
	err = h.Post(context.Background(), func(context.Context) error { return nil })
	var serr *seqsched.SessionError
	require.ErrorAs(t, err, &serr)
	require.Equal(t, "a", serr.Key)
	select {
	case err := <-returned:
		t.Fatalf("Discard returned %v while the running task had not returned", err)
	default:
	}
	close(release)
	require.NoError(t, <-returned)
	awaitAll(t, g)
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

func TestDiscardOfAnotherSessionFromATaskUnderLimitOne(t *testing.T) {
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

func TestDiscardFromTheErrorHandler(t *testing.T) {
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

func TestDiscardOfIdleAndUnknownKeys(t *testing.T) {
	s := newScheduler[string](t)
	require.NoError(t, s.Discard(context.Background(), "never"))
	h, err := s.Open("pinned")
	require.NoError(t, err)
	require.NoError(t, s.Discard(context.Background(), "pinned"))
	require.ErrorIs(t, h.Post(context.Background(), func(context.Context) error { return nil }), seqsched.ErrSessionClosing)
	require.ErrorIs(t, h.Discard(context.Background()), seqsched.ErrSessionClosing, "Discard through a closed handle")
	require.NoError(t, h.Close(context.Background()), "Close of a handle Discard closed")
	awaitAll(t, record(t, s, &recorder{}, "idle", "once"))
	require.NoError(t, s.Discard(context.Background(), "idle"))
	require.Zero(t, s.Stats().Sessions)
}

// Discard racing Submit, Post, Close, Remove and Shutdown: whatever the
// interleaving, every accepted future resolves once, with its task's
// result, ErrDiscarded or ErrClosed; every failed post is reported once;
// and the counters add up.
func TestDiscardRacingEveryOperation(t *testing.T) {
	for round := range 30 {
		var reported atomic.Int64
		s, err := seqsched.New[int](seqsched.WithErrorHandler(func(context.Context, int, error) { reported.Add(1) }),
			seqsched.WithMaxConcurrency(round%3))
		require.NoError(t, err)
		var mu sync.Mutex
		var fs []*seqsched.Future[struct{}]
		var posted atomic.Int64
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 40 {
					key := i % 3
					switch (g + i) % 6 {
					case 0, 1:
						f, err := s.Go(context.Background(), key, func(context.Context) error { return nil })
						if err == nil {
							mu.Lock()
							fs = append(fs, f)
							mu.Unlock()
						}
					case 2:
						if s.Post(context.Background(), key, func(context.Context) error { return errors.New("x") }) == nil {
							posted.Add(1)
						}
					case 3:
						_ = s.Discard(context.Background(), key)
					case 4:
						if h, err := s.Open(key); err == nil {
							_ = h.Close(context.Background())
						}
					case 5:
						_ = s.Remove(context.Background(), key)
					}
				}
			})
		}
		if round%2 == 1 {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = s.Shutdown(ctx)
		}
		wg.Wait()
		require.NoError(t, s.Shutdown(context.Background()))
		for _, f := range fs {
			select {
			case <-f.Done():
			default:
				t.Fatalf("round %d: a future is unresolved after Shutdown", round)
			}
			if _, err := f.Await(context.Background()); err != nil &&
				!errors.Is(err, seqsched.ErrDiscarded) && !errors.Is(err, seqsched.ErrClosed) {
				t.Fatalf("round %d: future resolved with %v", round, err)
			}
		}
		st := s.Stats()
		require.Equal(t, st.Submitted, st.Completed, "round %d", round)
		require.Equal(t, uint64(len(fs))+uint64(posted.Load()), st.Submitted, "round %d", round)
		require.Equal(t, posted.Load(), reported.Load(), "round %d: every post failed, and each was reported once", round)
	}
}

// The last Close racing an Open of the same key: the new handle either
// joins the session before its drain began or gets a fresh one, never a
// closed one; and its tasks run after the old session's.
func TestLastCloseRacingOpenNeverGivesAClosedHandle(t *testing.T) {
	for round := range 200 {
		s, err := seqsched.New[int]()
		require.NoError(t, err)
		h1, err := s.Open(1)
		require.NoError(t, err)
		var ran recorder
		require.NoError(t, h1.Post(context.Background(), func(context.Context) error { ran.add("old"); return nil }))
		closed := make(chan error, 1)
		go func() { closed <- h1.Close(context.Background()) }()
		h2, err := s.Open(1)
		require.NoError(t, err)
		f, err := h2.Go(context.Background(), func(context.Context) error { ran.add("new"); return nil })
		require.NoError(t, err, "round %d: a new handle is never a closed one", round)
		awaitAll(t, f)
		require.NoError(t, <-closed)
		require.Equal(t, []string{"old", "new"}, ran.get(), "round %d", round)
		require.NoError(t, h2.Close(context.Background()))
		require.NoError(t, s.Shutdown(context.Background()))
	}
}

func TestRemoveEndsTheSessionWhateverHandlesAreOpen(t *testing.T) {
	s := newScheduler[string](t)
	h1, err := s.Open("a")
	require.NoError(t, err)
	h2, err := s.Open("a")
	require.NoError(t, err)
	require.NoError(t, s.Remove(context.Background(), "a"))
	for _, h := range []*seqsched.Session[string]{h1, h2} {
		err := h.Post(context.Background(), func(context.Context) error { return nil })
		require.ErrorIs(t, err, seqsched.ErrSessionClosing)
		require.Equal(t, `seqsched: session "a": closing`, err.Error())
		require.NoError(t, h.Close(context.Background()))
	}
}

// recordHandler collects records as "LEVEL message".
type recordHandler struct {
	mu   sync.Mutex
	recs []string
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Level.String()+" "+r.Message)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }
func (h *recordHandler) get() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.recs...)
}

// Without WithLogger or WithErrorHandler, failures reach slog.Default(): a
// posted task's own error at Error, one that never ran because its
// submitter's ctx ended, or Discard dropped it, at Debug.
func TestFailuresReachTheDefaultLoggerAtTheirLevel(t *testing.T) {
	rh := &recordHandler{}
	old := slog.Default()
	slog.SetDefault(slog.New(rh))
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

// A discarded session waiting for a slot has nothing left to run: Discard
// returns without waiting for a slot to come free.
func TestDiscardOfASessionWaitingForASlotReturnsAtOnce(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	release, g := gate(t, s, "x") // holds the only slot
	var ran recorder
	queued := record(t, s, &ran, "b", "b waits for the slot")
	within(t, 5*time.Second, "Discard of a waiting session", func() {
		require.NoError(t, s.Discard(context.Background(), "b"))
	})
	_, err := queued.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrDiscarded)
	release()
	awaitAll(t, g)
	require.Empty(t, ran.get())
	awaitAll(t, record(t, s, &ran, "b", "fresh"))
	require.Equal(t, []string{"fresh"}, ran.get())
}

// A successor released because Discard ended the session it was held back
// behind, while that session waited for a slot, takes its place in the
// ready queue: the key waited its turn already, and does not wait another
// behind sessions queued after it (FuzzModel input 29afd5d526af70d1).
func TestSuccessorReleasedByDiscardKeepsItsPlaceInTheReadyQueue(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	var ran recorder
	gateA := make(chan struct{})
	aRunning := make(chan struct{})
	a, err := s.Go(context.Background(), "a", func(context.Context) error { close(aRunning); <-gateA; return nil })
	require.NoError(t, err)
	<-aRunning // a holds the only slot

	old, err := s.Open("b")
	require.NoError(t, err)
	dropped, err := seqsched.SubmitTo(context.Background(), old, func(context.Context) (int, error) {
		ran.add("b (old)")
		return 0, nil
	})
	require.NoError(t, err) // b waits for the slot: ready queue [b]
	var cs []*seqsched.Future[struct{}]
	for i := range 3 {
		cs = append(cs, record(t, s, &ran, "c", fmt.Sprintf("c%d", i))) // ready queue [b c]
	}
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(context.Background(), "b") }()
	for { // Remove has closed b once a task through its handle is refused
		f, err := old.Go(context.Background(), func(context.Context) error { return nil })
		if errors.Is(err, seqsched.ErrSessionClosing) {
			break
		}
		require.NoError(t, err)
		_ = f // a future, not a post: Discard leaves old b nothing to report
		runtime.Gosched()
	}
	succ, err := s.Open("b") // a successor, held back behind the closing b
	require.NoError(t, err)
	b2, err := seqsched.SubmitTo(context.Background(), succ, func(context.Context) (int, error) {
		ran.add("b (successor)")
		return 0, nil
	})
	require.NoError(t, err)
	require.NoError(t, old.Discard(context.Background())) // old b retires from the ready queue; the successor is released
	close(gateA)
	awaitAll(t, a)
	awaitAll(t, cs...)
	_, err = b2.Await(context.Background())
	require.NoError(t, err)
	_, err = dropped.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrDiscarded)
	require.NoError(t, <-removed)
	require.NoError(t, succ.Close(context.Background()))
	got := ran.get()
	require.Equal(t, []string{"b (successor)", "c0", "c1", "c2"}, got, "b's successor runs where b waited, before c")
}
