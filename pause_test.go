// Pause and halt: a paused session starts no task until Resume (its
// running task finishes), holds no goroutine and no slot, still accepts
// tasks within WithMaxQueue, and runs them in order once resumed; a failed
// HaltOnError task pauses its session before its next task and is reported
// once, with the key. Remove drains a paused key only after Resume,
// Discard ends it at once, and Shutdown waits for it until its ctx ends.

package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// testTimeout bounds a wait that should end at once: a guard against a
// hang, never a synchronisation.
const testTimeout = 10 * time.Second

// resolved reports whether f has resolved, without waiting.
func resolved[T any](f *seqsched.Future[T]) bool {
	select {
	case <-f.Done():
		return true
	default:
		return false
	}
}

func TestPausedSessionFinishesItsTaskThenStartsNothingUntilResumed(t *testing.T) {
	s := newScheduler[string](t)
	release, g := gate(t, s, "k")
	require.NoError(t, s.Pause("k"))
	var r recorder
	fs := []*seqsched.Future[struct{}]{
		record(t, s, &r, "k", "a"),
		record(t, s, &r, "k", "b"),
		record(t, s, &r, "k", "c", seqsched.High),
	}
	release()
	awaitAll(t, g) // the running task finishes; its session parks as it resolves

	require.Empty(t, r.get(), "a paused session must start nothing")
	require.True(t, s.Paused("k"))
	high, normal := s.Queued("k")
	require.Equal(t, [2]int{1, 2}, [2]int{high, normal})
	st := s.Stats()
	require.Equal(t, 1, st.Paused)
	require.Equal(t, 1, st.Sessions, "a paused session with tasks counts as a session with work")
	require.Equal(t, 0, st.Running)

	require.NoError(t, s.Resume("k"))
	awaitAll(t, fs...)
	require.Equal(t, []string{"c", "a", "b"}, r.get(), "resumed in order, High first")
	require.False(t, s.Paused("k"))
	require.Zero(t, s.Stats().Paused)
}

func TestPauseOfAnUnknownKeyHoldsItsNextTasks(t *testing.T) {
	s := newScheduler[string](t)
	require.NoError(t, s.Pause("new"))
	require.True(t, s.Paused("new"))
	var r recorder
	f := record(t, s, &r, "new", "x")
	other := record(t, s, &r, "other", "y")
	awaitAll(t, other)
	require.False(t, resolved(f))
	require.Equal(t, []string{"y"}, r.get())
	require.NoError(t, s.Resume("new"))
	awaitAll(t, f)
	require.Equal(t, []string{"y", "x"}, r.get())
}

func TestResumeOfAKeyNotPausedDoesNothing(t *testing.T) {
	s := newScheduler[string](t)
	require.NoError(t, s.Resume("never"))
	require.False(t, s.Paused("never"))
	require.Zero(t, s.Stats().Paused)
	var r recorder
	awaitAll(t, record(t, s, &r, "never", "x"))
	require.Equal(t, []string{"x"}, r.get())
}

func TestPausedSessionHoldsNoSlot(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	require.NoError(t, s.Pause("paused"))
	var r recorder
	held := record(t, s, &r, "paused", "held")
	// With one slot, "other" can run only if the paused session holds none.
	awaitAll(t, record(t, s, &r, "other", "other"))
	require.False(t, resolved(held))
	require.NoError(t, s.Resume("paused"))
	awaitAll(t, held)
	require.Equal(t, []string{"other", "held"}, r.get())
}

func TestPausedSessionHoldsNoGoroutine(t *testing.T) {
	s := newScheduler[int](t)
	before := runtime.NumGoroutine()
	const keys = 1000
	var fs []*seqsched.Future[struct{}]
	for k := range keys {
		require.NoError(t, s.Pause(k))
		for range 3 {
			f, err := s.Go(context.Background(), k, func(context.Context) error { return nil })
			require.NoError(t, err)
			fs = append(fs, f)
		}
	}
	require.Less(t, runtime.NumGoroutine()-before, 10, "paused sessions must hold no goroutine")
	require.Equal(t, keys, s.Stats().Paused)
	require.Equal(t, 3*keys, s.Stats().Queued)
	for k := range keys {
		require.NoError(t, s.Resume(k))
	}
	awaitAll(t, fs...)
}

func TestPausedSessionStillAcceptsWithinMaxQueue(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxQueue(2))
	require.NoError(t, s.Pause("k"))
	var r recorder
	fs := []*seqsched.Future[struct{}]{record(t, s, &r, "k", "1"), record(t, s, &r, "k", "2")}
	_, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
	require.ErrorIs(t, err, seqsched.ErrQueueFull)
	require.NoError(t, s.Resume("k"))
	awaitAll(t, fs...)
	require.Equal(t, []string{"1", "2"}, r.get())
}

func TestHandlePauseAndResume(t *testing.T) {
	s := newScheduler[string](t)
	h, err := s.Open("k")
	require.NoError(t, err)
	require.NoError(t, h.Pause())
	require.True(t, s.Paused("k"))
	var r recorder
	f, err := h.Go(context.Background(), func(context.Context) error { r.add("x"); return nil })
	require.NoError(t, err)
	require.False(t, resolved(f))
	require.NoError(t, h.Resume())
	awaitAll(t, f)
	require.NoError(t, h.Close(context.Background()))
	require.ErrorIs(t, h.Pause(), seqsched.ErrSessionClosing)
	require.ErrorIs(t, h.Resume(), seqsched.ErrSessionClosing)
	var zero *seqsched.Session[string]
	require.ErrorIs(t, zero.Pause(), seqsched.ErrNotNew)
}

func TestPauseAfterCloseReturnsErrClosed(t *testing.T) {
	s := newScheduler[string](t)
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Pause("k"), seqsched.ErrClosed)
	require.NoError(t, s.Resume("k"))
}

func TestPauseBadInput(t *testing.T) {
	var zero seqsched.Scheduler[string]
	require.ErrorIs(t, zero.Pause("k"), seqsched.ErrNotNew)
	require.ErrorIs(t, zero.Resume("k"), seqsched.ErrNotNew)
	require.False(t, zero.Paused("k"))
	s := newScheduler[any](t)
	var ke *seqsched.KeyError
	require.ErrorAs(t, s.Pause([]int{1}), &ke)
	require.ErrorAs(t, s.Resume([]int{1}), &ke)
}

func TestRemoveOfAPausedKeyDrainsOnlyAfterResume(t *testing.T) {
	s := newScheduler[string](t)
	require.NoError(t, s.Pause("k"))
	var r recorder
	fs := []*seqsched.Future[struct{}]{record(t, s, &r, "k", "a"), record(t, s, &r, "k", "b")}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Remove(ctx, "k"), context.Canceled, "Remove of a paused key waits for Resume")
	_, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
	require.ErrorIs(t, err, seqsched.ErrSessionClosing, "Remove refuses new tasks at once")
	require.Empty(t, r.get())

	require.NoError(t, s.Resume("k"))
	require.NoError(t, s.Remove(context.Background(), "k"))
	awaitAll(t, fs...)
	require.Equal(t, []string{"a", "b"}, r.get())
	require.False(t, s.Paused("k"), "a removed key is forgotten")
}

func TestRemoveOfAPausedKeyWithNoTasksReturnsAtOnce(t *testing.T) {
	s := newScheduler[string](t)
	require.NoError(t, s.Pause("k"))
	require.NoError(t, s.Remove(context.Background(), "k"))
	require.False(t, s.Paused("k"))
	require.Zero(t, s.Stats().Paused)
}

func TestDiscardEndsAPausedKeyAtOnce(t *testing.T) {
	var fl failures
	s := newScheduler[string](t, seqsched.WithErrorHandler(fl.handle))
	require.NoError(t, s.Pause("k"))
	f, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.NoError(t, s.Post(context.Background(), "k", func(context.Context) error { return nil }))
	require.NoError(t, s.Discard(context.Background(), "k"))
	_, err = f.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrDiscarded)
	require.Equal(t, []error{seqsched.ErrDiscarded}, fl.get("k"), "the dropped post is reported before Discard returns")
	require.False(t, s.Paused("k"))
	st := s.Stats()
	require.Zero(t, st.Paused)
	require.Equal(t, uint64(2), st.Discarded)
}

func TestShutdownWaitsForPausedSessionsUntilResume(t *testing.T) {
	s, err := seqsched.New[string]()
	require.NoError(t, err)
	require.NoError(t, s.Pause("k"))
	var r recorder
	f := record(t, s, &r, "k", "a")
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	require.NoError(t, s.Resume("k"), "Resume works during Shutdown")
	within(t, testTimeout, "Shutdown", func() { require.NoError(t, <-done) })
	awaitAll(t, f)
	require.Equal(t, []string{"a"}, r.get())
}

// attrsLogger returns a logger that adds each record to r as
// "LEVEL message key=value ...".
func attrsLogger(r *recorder) *slog.Logger {
	return slog.New(&funcHandler{handle: func(_ context.Context, rec slog.Record) error {
		line := rec.Level.String() + " " + rec.Message
		rec.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
		r.add("%s", line)
		return nil
	}})
}

// Shutdown waits for a paused or halted key's work until Resume, Discard
// or its ctx's end, and says so once, at Warn, with the count of such keys
// and how to end the wait.
func TestShutdownWaitingOnPausedKeysSaysSoOnce(t *testing.T) {
	var logs recorder
	s, err := seqsched.New[string](seqsched.WithLogger(attrsLogger(&logs)), seqsched.WithErrorHandler(func(context.Context, string, error) {}))
	require.NoError(t, err)
	require.NoError(t, s.Pause("paused"))
	var r recorder
	a := record(t, s, &r, "paused", "a")
	_, err = s.Go(context.Background(), "halted", func(context.Context) error { return errOverdraft }, seqsched.HaltOnError)
	require.NoError(t, err)
	b := record(t, s, &r, "halted", "b")
	require.Eventually(t, func() bool { return s.Paused("halted") }, testTimeout, time.Millisecond)
	require.NoError(t, s.Pause("idle")) // paused with no work: nothing to wait for
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	require.Eventually(t, func() bool { return len(logs.get()) > 0 }, testTimeout, time.Millisecond)
	require.NoError(t, s.Resume("paused"))
	require.NoError(t, s.Resume("halted"))
	within(t, testTimeout, "Shutdown", func() { require.NoError(t, <-done) })
	awaitAll(t, a, b)
	require.Equal(t, []string{"WARN seqsched: Shutdown waits for paused or halted keys with work; " +
		"Resume or Discard them, or pass Shutdown a ctx with a deadline keys=2"}, logs.get())
}

// Remove of a paused key with work waits for Resume, and says so once.
func TestRemoveWaitingOnAPausedKeySaysSo(t *testing.T) {
	var logs recorder
	s := newScheduler[string](t, seqsched.WithLogger(attrsLogger(&logs)))
	require.NoError(t, s.Pause("k"))
	var r recorder
	f := record(t, s, &r, "k", "a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Remove(ctx, "k"), context.Canceled)
	require.Eventually(t, func() bool { return len(logs.get()) > 0 }, testTimeout, time.Millisecond)
	require.Equal(t, []string{"WARN seqsched: Remove waits for a paused key with work; " +
		"Resume or Discard it, or pass a ctx with a deadline session=k"}, logs.get())
	require.NoError(t, s.Resume("k"))
	awaitAll(t, f)
}

func TestShutdownWhoseCtxEndsDropsPausedTasksWithErrClosed(t *testing.T) {
	var fl failures
	s, err := seqsched.New[string](seqsched.WithErrorHandler(fl.handle))
	require.NoError(t, err)
	require.NoError(t, s.Pause("k"))
	f, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.NoError(t, s.Post(context.Background(), "k", func(context.Context) error { return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Shutdown(ctx), context.Canceled)
	_, err = f.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrClosed)
	require.NoError(t, s.Shutdown(context.Background()), "every goroutine is gone once the drop is reported")
	require.Equal(t, []error{seqsched.ErrClosed}, fl.get("k"))
}

func TestPauseHoldsTheKeysClosingSessionToo(t *testing.T) {
	s := newScheduler[string](t)
	release, g := gate(t, s, "k")
	var r recorder
	old, h, f := successorBehindClosing(t, s, &r)
	require.NoError(t, s.Pause("k"))
	release()
	awaitAll(t, g)
	require.Empty(t, r.get(), "the closing session is paused with its key")
	require.False(t, resolved(old))
	require.NoError(t, s.Resume("k"))
	awaitAll(t, old, f)
	require.Equal(t, []string{"old", "new"}, r.get())
	require.NoError(t, h.Close(context.Background()))
}

// Pause applies to the key: a Pause while Remove drains the key's running
// task holds the session Open makes meanwhile, and Paused answers for the
// key.
func TestPauseHoldsTheSessionOpenMakesWhileTheKeyCloses(t *testing.T) {
	s := newScheduler[string](t)
	release, g := gate(t, s, "k")
	t.Cleanup(func() { release(); _ = s.Resume("k") }) // before Shutdown's, if the test fails
	require.NoError(t, s.Pause("k"))
	begun, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Remove(begun, "k"), context.Canceled) // the drain begins, and goes on
	h, err := s.Open("k")                                      // a successor, held behind the closing session
	require.NoError(t, err)
	require.True(t, s.Paused("k"), "the key is paused, whichever of its sessions is newest")
	var r recorder
	f, err := h.Go(context.Background(), func(context.Context) error { r.add("new"); return nil })
	require.NoError(t, err)
	release()
	awaitAll(t, g)
	require.Eventually(t, func() bool { return s.Stats().Paused == 1 }, testTimeout, time.Millisecond,
		"the successor parks once its predecessor is forgotten")
	require.Empty(t, r.get(), "the successor runs nothing while its key is paused")
	require.False(t, resolved(f))
	require.True(t, s.Paused("k"))
	require.NoError(t, s.Resume("k"))
	awaitAll(t, f)
	require.Equal(t, []string{"new"}, r.get())
	require.NoError(t, h.Close(context.Background()))
}

// Paused answers for the key, not only its newest session: a closing
// session that a failed HaltOnError task halts after Open made its
// successor holds the key (the successor waits behind it and runs
// nothing), and Paused says so until Resume.
func TestPausedAnswersForAKeyWhoseClosingSessionHalted(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithErrorHandler(func(context.Context, string, error) {}))
	started, fail := make(chan struct{}), make(chan struct{})
	failing, err := s.Go(context.Background(), "k", func(context.Context) error {
		close(started)
		<-fail
		return errOverdraft
	}, seqsched.HaltOnError)
	require.NoError(t, err)
	<-started
	t.Cleanup(func() { _ = s.Resume("k") }) // before Shutdown's, if the test fails
	var r recorder
	old, h, f := successorBehindClosing(t, s, &r)
	require.False(t, s.Paused("k"))
	close(fail)
	_, err = failing.Await(context.Background())
	require.ErrorIs(t, err, errOverdraft)
	require.Eventually(t, func() bool { return s.Stats().Paused == 1 }, testTimeout, time.Millisecond,
		"the closing session parks, halted, with old queued")
	require.True(t, s.Paused("k"), "the key is halted, though its newest session is not")
	require.Empty(t, r.get(), "nothing of the key runs while it is halted")
	require.False(t, resolved(f))
	require.NoError(t, s.Resume("k"))
	awaitAll(t, old, f)
	require.Equal(t, []string{"old", "new"}, r.get())
	require.False(t, s.Paused("k"))
	require.NoError(t, h.Close(context.Background()))
}

// weightGate returns a WithWeight option whose function, the first time a
// session's goroutine asks it, signals entered and waits for open: the
// goroutine exists and has taken no task yet.
func weightGate() (opt seqsched.Option, entered, open chan struct{}) {
	entered, open = make(chan struct{}), make(chan struct{})
	var once sync.Once
	return seqsched.WithWeight(func(string) int {
		once.Do(func() { close(entered); <-open })
		return 1
	}), entered, open
}

// A task starts when its session's goroutine runs it, not when it is
// accepted: a task posted to an idle key, whose goroutine is on its way,
// is held by a Pause that comes before the goroutine takes it.
func TestPauseHoldsATaskPostedToAnIdleKeyBeforeItsGoroutineTakesIt(t *testing.T) {
	opt, entered, open := weightGate()
	s := newScheduler[string](t, opt)
	var r recorder
	f := record(t, s, &r, "k", "a")
	<-entered // k's goroutine runs, and has not taken a
	require.NoError(t, s.Pause("k"))
	close(open)
	require.Eventually(t, func() bool { return s.Stats().Paused == 1 }, testTimeout, time.Millisecond)
	require.Empty(t, r.get(), "a task whose fn had not begun when Pause returned must wait for Resume")
	require.False(t, resolved(f))
	require.NoError(t, s.Resume("k"))
	awaitAll(t, f)
	require.Equal(t, []string{"a"}, r.get())
}

// bank is the example: withdraw 50, deposit 100, withdraw 150 on a
// balance of 100, each a HaltOnError task.
func bankOps(t *testing.T, s *seqsched.Scheduler[string], balance *int, amounts []int) []*seqsched.Future[int] {
	t.Helper()
	var fs []*seqsched.Future[int]
	for _, amount := range amounts {
		f, err := seqsched.Submit(context.Background(), s, "acct", func(context.Context) (int, error) {
			if *balance+amount < 0 {
				return *balance, fmt.Errorf("overdraft: balance %d, amount %d", *balance, amount)
			}
			*balance += amount
			return *balance, nil
		}, seqsched.HaltOnError)
		require.NoError(t, err)
		fs = append(fs, f)
	}
	return fs
}

var errOverdraft = errors.New("overdraft")

func TestHaltOnErrorPausesTheSessionBeforeItsNextTask(t *testing.T) {
	var fl failures
	s := newScheduler[string](t, seqsched.WithErrorHandler(fl.handle))
	balance := 20
	release, g := gate(t, s, "acct")
	fs := bankOps(t, s, &balance, []int{-50, +100, -150})
	release()
	awaitAll(t, g)
	_, err := fs[0].Await(context.Background())
	require.ErrorContains(t, err, "overdraft")

	require.True(t, s.Paused("acct"))
	require.False(t, resolved(fs[1]), "the halted key's next task must not start")
	errs := fl.get("acct")
	require.Len(t, errs, 1, "the halt is reported once")
	var he *seqsched.HaltError
	require.ErrorAs(t, errs[0], &he)
	require.Equal(t, "acct", he.Key)
	require.ErrorIs(t, errs[0], seqsched.ErrHalted)
	require.ErrorContains(t, he.Err, "overdraft")
	require.Equal(t, `seqsched: session "acct" halted: overdraft: balance 20, amount -50`, errs[0].Error())
	st := s.Stats()
	require.Equal(t, uint64(1), st.Halts)
	require.Equal(t, 1, st.Paused)

	require.NoError(t, s.Resume("acct"))
	v, err := fs[1].Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, 120, v)
	_, err = fs[2].Await(context.Background())
	require.ErrorContains(t, err, "overdraft", "the third fails and halts again")
	require.True(t, s.Paused("acct"))
	require.Equal(t, uint64(2), s.Stats().Halts)
	require.NoError(t, s.Resume("acct"))
}

func TestHaltOnPanicAndGoexit(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(context.Context) error
		want error
	}{
		{"panic", func(context.Context) error { panic(errOverdraft) }, errOverdraft},
		{"goexit", func(context.Context) error { runtime.Goexit(); return nil }, seqsched.ErrGoexit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fl failures
			var r recorder
			s := newScheduler[string](t, seqsched.WithErrorHandler(fl.handle), seqsched.WithLogger(r.logger()))
			f, err := s.Go(context.Background(), "k", tc.fn, seqsched.HaltOnError)
			require.NoError(t, err)
			next := record(t, s, &r, "k", "next")
			_, err = f.Await(context.Background()) // resolves after its halt is reported
			require.ErrorIs(t, err, tc.want)
			require.Len(t, fl.get("k"), 1)
			require.ErrorIs(t, fl.get("k")[0], seqsched.ErrHalted)
			require.ErrorIs(t, fl.get("k")[0], tc.want)
			require.True(t, s.Paused("k"))
			require.False(t, resolved(next))
			require.NoError(t, s.Resume("k"))
			awaitAll(t, next)
		})
	}
}

func TestHaltedPostIsReportedOnceAndLoggedAtErrorWithoutAHandler(t *testing.T) {
	var r recorder
	logged := make(chan struct{}, 1)
	h := r.handler()
	inner := h.handle
	h.handle = func(ctx context.Context, rec slog.Record) error {
		err := inner(ctx, rec)
		logged <- struct{}{}
		return err
	}
	s := newScheduler[string](t, seqsched.WithLogger(slog.New(h)))
	require.NoError(t, s.Post(context.Background(), "k", func(context.Context) error { return errOverdraft }, seqsched.HaltOnError))
	<-logged
	require.True(t, s.Paused("k"), "the key is halted before the halt is reported")
	require.NoError(t, s.Resume("k"))
	require.NoError(t, s.Remove(context.Background(), "k"))
	require.Equal(t, []string{"ERROR seqsched: session halted"}, r.get())
}

func TestTasksThatNeverRanOrSucceededHaltNothing(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithHaltOnError())
	release, g := gate(t, s, "k")
	ctx, cancel := context.WithCancel(context.Background())
	skipped, err := s.Go(ctx, "k", func(context.Context) error { return errOverdraft })
	require.NoError(t, err)
	cancel()
	var r recorder
	ok := record(t, s, &r, "k", "ok")
	release()
	awaitAll(t, g, ok)
	_, err = skipped.Await(context.Background())
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, s.Paused("k"))
	require.Zero(t, s.Stats().Halts)
}

// A halt needs a session to halt: a HaltOnError task that fails because
// Discard ended its session while it ran halts nothing; a posted one's
// failure is reported as any other.
func TestAHaltOnErrorTaskThatDiscardEndsHaltsNothing(t *testing.T) {
	var fl failures
	s := newScheduler[string](t, seqsched.WithErrorHandler(fl.handle))
	running := make(chan struct{})
	require.NoError(t, s.Post(context.Background(), "k", func(ctx context.Context) error {
		close(running)
		<-ctx.Done()
		return ctx.Err()
	}, seqsched.HaltOnError))
	<-running
	require.NoError(t, s.Discard(context.Background(), "k"))
	require.Zero(t, s.Stats().Halts)
	require.False(t, s.Paused("k"))
	errs := fl.get("k")
	require.Len(t, errs, 1)
	require.NotErrorIs(t, errs[0], seqsched.ErrHalted)
	require.ErrorIs(t, errs[0], context.Canceled)
	// The key is fresh: its next task runs.
	var r recorder
	awaitAll(t, record(t, s, &r, "k", "next"))
	require.Equal(t, []string{"next"}, r.get())
}

func TestWithHaltOnErrorHaltsEveryTask(t *testing.T) {
	var fl failures
	s := newScheduler[string](t, seqsched.WithHaltOnError(), seqsched.WithErrorHandler(fl.handle))
	f, err := s.Go(context.Background(), "k", func(context.Context) error { return errOverdraft })
	require.NoError(t, err)
	var r recorder
	next := record(t, s, &r, "k", "next")
	_, err = f.Await(context.Background())
	require.ErrorIs(t, err, errOverdraft, "the future gets fn's own error")
	require.True(t, s.Paused("k"))
	require.Len(t, fl.get("k"), 1)
	require.NoError(t, s.Resume("k"))
	awaitAll(t, next)
}

func TestAnErrorHandlerMayResumeTheKeyItIsToldHalted(t *testing.T) {
	var s *seqsched.Scheduler[string]
	s = newScheduler[string](t, seqsched.WithErrorHandler(func(_ context.Context, key string, err error) {
		if errors.Is(err, seqsched.ErrHalted) {
			_ = s.Resume(key) // a policy: log and go on
		}
	}))
	f, err := s.Go(context.Background(), "k", func(context.Context) error { return errOverdraft }, seqsched.HaltOnError)
	require.NoError(t, err)
	var r recorder
	next := record(t, s, &r, "k", "next")
	awaitAll(t, next)
	_, err = f.Await(context.Background())
	require.ErrorIs(t, err, errOverdraft)
	require.False(t, s.Paused("k"))
}

// successorBehindClosing queues "old" on key "k", whose running task
// holds it, begins a Remove of "k" that goes on draining (its ctx ended
// before it was called), and opens "k" again: the successor, held behind
// the closing session, gets "new". Both record into r.
func successorBehindClosing(t *testing.T, s *seqsched.Scheduler[string], r *recorder) (
	old *seqsched.Future[struct{}], h *seqsched.Session[string], f *seqsched.Future[struct{}]) {
	t.Helper()
	old = record(t, s, r, "k", "old")
	begun, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Remove(begun, "k"), context.Canceled) // the drain begins, and goes on
	h, err := s.Open("k")                                      // a successor, held behind the closing session
	require.NoError(t, err)
	f, err = h.Go(context.Background(), func(context.Context) error { r.add("new"); return nil })
	require.NoError(t, err)
	return old, h, f
}

// A Pause while a backlog's t2 runs holds t3..t20: t2 finishes, nothing
// else starts, they stay queued, and Resume runs them in order. So does
// one while its t12 runs, in the worker's second turn, for t13..t20.
func TestPauseHoldsEveryTaskNotYetStarted(t *testing.T) {
	forBacklogGatesByKeyAndHandle(t, testPauseHoldsEveryTaskNotYetStarted)
}

func testPauseHoldsEveryTaskNotYetStarted(t *testing.T, at int, by string) {
	s := newScheduler[string](t)
	t.Cleanup(func() { _ = s.Resume("k") }) // before Shutdown's cleanup, should a check fail while paused
	h, err := s.Open("k")
	require.NoError(t, err)
	b := queueBacklogAt(t, s, "k", at, nil, nil)
	if by == "key" {
		require.NoError(t, s.Pause("k"))
	} else {
		require.NoError(t, h.Pause())
	}
	b.release()
	awaitAll(t, b.fs[at-1]) // t(at) finishes; its session parks as it resolves

	high, normal := s.Queued("k")
	require.Equal(t, [2]int{0, backlogLen - at}, [2]int{high, normal}, "the tasks after t%d stay queued", at)
	require.Equal(t, names(1, at), b.r.get(), "a paused session must start nothing")
	for i, f := range b.fs[at:] {
		require.False(t, resolved(f), "t%d resolved while paused", i+at+1)
	}
	st := s.Stats()
	require.Equal(t, 1, st.Paused)
	require.Equal(t, 0, st.Running)
	require.Equal(t, backlogLen-at, st.Normal.Queued)

	if by == "key" {
		require.NoError(t, s.Resume("k"))
	} else {
		require.NoError(t, h.Resume())
	}
	awaitAll(t, b.fs...)
	require.Equal(t, names(1, backlogLen), b.r.get(), "resumed in order")
	require.NoError(t, h.Close(context.Background()))
}
