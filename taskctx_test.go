// The task's ctx: it carries the submitter's values and deadline, is
// canceled with the submitter's ctx (a task whose ctx ended before it
// started is skipped), ends when the task is over, and keeps the whole
// context.Context contract in every state; ctxViolations is the one
// checker of that contract, used here and by the model test.

package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTaskContextCarriesSubmitterValuesAndDeadline(t *testing.T) {
	s := newScheduler[string](t)
	type key struct{}
	deadline := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), deadline)
	defer cancel()
	f, err := seqsched.Submit(ctx, s, "k", func(ctx context.Context) (any, error) {
		d, ok := ctx.Deadline()
		assert.True(t, ok)
		assert.Equal(t, deadline, d)
		return ctx.Value(key{}), ctx.Err()
	})
	require.NoError(t, err)
	v, err := f.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, "v", v)
}

func TestTaskContextIsCanceledWithSubmitterContext(t *testing.T) {
	for _, derive := range []bool{false, true} {
		name := map[bool]string{false: "task ctx", true: "ctx derived in task"}[derive]
		t.Run(name, func(t *testing.T) {
			s := newScheduler[string](t)
			ctx, cancel := context.WithCancel(context.Background())
			started := make(chan struct{})
			f, err := s.Go(ctx, "k", func(ctx context.Context) error {
				if derive {
					var stop context.CancelFunc
					ctx, stop = context.WithCancel(ctx)
					defer stop()
				}
				close(started)
				<-ctx.Done()
				return ctx.Err()
			})
			require.NoError(t, err)
			<-started
			cancel()
			_, err = f.Await(context.Background())
			require.ErrorIs(t, err, context.Canceled)
		})
	}
}

func TestTaskWhoseContextEndedBeforeStartIsSkipped(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	release, g := gate(t, s, "k")
	ctx, cancel := context.WithCancel(context.Background())
	before := record(t, s, &r, "k", "before")
	skipped, err := s.Go(ctx, "k", func(context.Context) error { r.add("must not run"); return nil })
	require.NoError(t, err)
	after := record(t, s, &r, "k", "after")
	cancel()
	release()
	awaitAll(t, g, before, after)
	_, err = skipped.Await(context.Background())
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{"before", "after"}, r.get())
	require.Equal(t, uint64(1), s.Stats().Skipped)
}

// A posted task's ctx keeps the context contract, and the deadlock guard
// knows it.
func TestPostedTaskCtxKeepsTheContractAndTheDeadlockGuardKnowsIt(t *testing.T) {
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

// ctxProbeKey is a value the tests put in submit ctxs, so that the
// conformance check can see that a task's ctx carries it.
type ctxProbeKey struct{}

// ctxViolations checks ctx against the whole context.Context contract at
// this moment and returns what it breaks (nil when nothing):
//   - Done closed ⇒ Err non-nil; Err non-nil ⇒ Done closed;
//   - Err, once non-nil, is stable, and so are Done's channel and Deadline;
//   - context.Cause is non-nil once Err is;
//   - Value(ctxProbeKey{}) is want (pass nil for "not set");
//   - WithCancel, WithTimeout, AfterFunc and WithoutCancel derive from it
//     without panicking; a child of a done ctx is done at once with its
//     parent's error, and an AfterFunc on it runs.
//
// It is safe to call from any goroutine at any moment, also while ctx
// changes state; a violation is reported whatever the interleaving.
func ctxViolations(ctx context.Context, want any) (v []string) {
	add := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }
	defer func() {
		if r := recover(); r != nil {
			add("panicked: %v", r)
		}
	}()
	d1, ok1 := ctx.Deadline()
	done := ctx.Done()
	errBefore := ctx.Err()
	closed := isClosed(done)
	errAfter := ctx.Err()
	if errBefore != nil && !closed {
		add("Err() = %v while Done() is not closed", errBefore)
	}
	if closed && errAfter == nil {
		add("Done() is closed but Err() = nil")
	}
	if errBefore != nil && errAfter != errBefore {
		add("Err() changed from %v to %v", errBefore, errAfter)
	}
	if ctx.Done() != done {
		add("Done() returned a different channel")
	}
	if d2, ok2 := ctx.Deadline(); !d2.Equal(d1) || ok2 != ok1 {
		add("Deadline() changed from %v,%v to %v,%v", d1, ok1, d2, ok2)
	}
	if errAfter != nil && context.Cause(ctx) == nil {
		add("Err() = %v but Cause() = nil", errAfter)
	}
	if got := ctx.Value(ctxProbeKey{}); got != want {
		add("Value(probe) = %v; want %v", got, want)
	}

	child, cancel := context.WithCancel(ctx)
	if closed {
		if !isClosed(child.Done()) || !errors.Is(child.Err(), errAfter) {
			add("WithCancel of a done ctx: child done %v, Err %v; want done with %v",
				isClosed(child.Done()), child.Err(), errAfter)
		}
	}
	cancel()
	timed, cancel := context.WithTimeout(ctx, time.Hour)
	if closed && !isClosed(timed.Done()) {
		add("WithTimeout of a done ctx is not done")
	}
	if dl, ok := timed.Deadline(); !ok || (ok1 && dl.After(d1)) {
		add("WithTimeout's deadline %v,%v ignores the ctx's %v,%v", dl, ok, d1, ok1)
	}
	cancel()
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { close(fired) })
	if closed {
		// The contract: f runs, on its own goroutine, at once. The timer
		// only turns a hang into a report; it synchronises nothing.
		select {
		case <-fired:
		case <-time.After(10 * time.Second):
			add("AfterFunc on a done ctx never ran")
		}
	} else {
		stop()
	}
	detached := context.WithoutCancel(ctx)
	if detached.Done() != nil || detached.Err() != nil || detached.Value(ctxProbeKey{}) != want {
		add("WithoutCancel: Done %v, Err %v, Value %v", detached.Done(), detached.Err(), detached.Value(ctxProbeKey{}))
	}
	return v
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// ctxChecker runs ctxViolations on a ctx from several goroutines at once,
// until stop, and collects what they find.
type ctxChecker struct {
	wg   sync.WaitGroup
	stop chan struct{}
	mu   sync.Mutex
	v    []string
}

// finish stops the checkers and returns what they found.
func (c *ctxChecker) finish() []string {
	close(c.stop)
	c.wg.Wait()
	return c.v
}

func checkCtxConcurrently(ctx context.Context, want any, goroutines int) *ctxChecker {
	c := &ctxChecker{stop: make(chan struct{})}
	for range goroutines {
		c.wg.Go(func() {
			for {
				if v := ctxViolations(ctx, want); len(v) > 0 {
					c.mu.Lock()
					c.v = append(c.v, v...)
					c.mu.Unlock()
					return
				}
				select {
				case <-c.stop:
					return
				default:
				}
			}
		})
	}
	return c
}

// The task's ctx keeps the context contract at every moment, seen from
// other goroutines while it ends: when Discard cuts the running task short,
// and when a task is over. Checkers run ctxViolations in a loop from two
// goroutines across each end.
func TestTaskCtxKeepsTheContractWhileItEndsSeenFromOtherGoroutines(t *testing.T) {
	for _, end := range []string{"discard", "over"} {
		t.Run(end, func(t *testing.T) {
			for range 50 {
				s := newScheduler[string](t)
				submit := context.WithValue(context.Background(), ctxProbeKey{}, "probe")
				ctxs := make(chan context.Context, 1)
				release := make(chan struct{})
				f, err := s.Go(submit, "a", func(ctx context.Context) error {
					ctxs <- ctx
					<-release
					return nil
				})
				require.NoError(t, err)
				ctx := <-ctxs
				c := checkCtxConcurrently(ctx, "probe", 2)
				if end == "discard" {
					done := make(chan error, 1)
					go func() { done <- s.Discard(context.Background(), "a") }()
					<-ctx.Done()
					close(release)
					require.NoError(t, <-done)
					require.ErrorIs(t, seqsched.Cause(ctx), seqsched.ErrDiscarded)
				} else {
					close(release)
					awaitAll(t, f)
				}
				require.ErrorIs(t, ctx.Err(), context.Canceled)
				require.Empty(t, c.finish())
				require.Empty(t, ctxViolations(ctx, "probe"))
			}
		})
	}
}

// Cause keeps the first reason, as Err does: a running task's ctx that
// Discard ended reports ErrDiscarded, and still does once its submit ctx's
// own deadline has passed.
func TestCauseOfADiscardedTaskStaysErrDiscardedAfterItsSubmitCtxEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[string](t)
		submitCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		running := make(chan struct{})
		var before, after, err error
		f, err := s.Go(submitCtx, "k", func(ctx context.Context) error {
			close(running)
			<-ctx.Done()
			before = seqsched.Cause(ctx)
			time.Sleep(2 * time.Second) // the bubble's clock: the submit ctx's deadline passes
			after = seqsched.Cause(ctx)
			return ctx.Err()
		})
		require.NoError(t, err)
		<-running
		require.NoError(t, s.Discard(context.Background(), "k"))
		_, err = f.Await(context.Background())
		require.ErrorIs(t, err, context.Canceled, "Err keeps its first reason")
		require.ErrorIs(t, before, seqsched.ErrDiscarded)
		require.ErrorIs(t, after, seqsched.ErrDiscarded, "Cause keeps its first reason")
	})
}

// An Await given a task's own ctx ends when that ctx does, whichever of
// its reasons comes, with the ctx's error: the submit ctx ends, Discard
// ends the task's session, Shutdown gives up, or the task is over (the
// Await runs on a goroutine of the task's). It does so whether or not the
// ctx's done state was made before (ctx.Done called) or while it waits
// (another goroutine calls ctx.Done then). The future awaited never
// resolves meanwhile: its task waits for a gate opened at the end.
func TestAwaitGivenTheTasksCtxEndsWithIt(t *testing.T) {
	type end int
	const (
		submitCtxEnds end = iota
		discard
		forcedShutdown
		taskOver
	)
	for _, v := range []struct {
		name      string
		end       end
		wantCause error
	}{
		{"submit ctx ends", submitCtxEnds, errBecause},
		{"Discard", discard, seqsched.ErrDiscarded},
		{"forced Shutdown", forcedShutdown, context.Canceled},
		{"task over", taskOver, context.Canceled},
	} {
		for _, state := range []string{"no done state", "done state made before", "done state made while waiting"} {
			t.Run(v.name+"/"+state, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s, err := seqsched.New[string]()
					require.NoError(t, err)
					open := make(chan struct{})
					answer, err := s.Go(context.Background(), "B", func(context.Context) error { <-open; return nil })
					require.NoError(t, err)
					submitCtx, cancel := context.WithCancelCause(context.Background())
					defer cancel(nil)
					var taskCtx context.Context
					awaited := make(chan error, 1)
					finish := make(chan struct{}) // the task returns then (taskOver)
					asker, err := s.Go(submitCtx, "A", func(ctx context.Context) error {
						taskCtx = ctx
						if state == "done state made before" {
							_ = ctx.Done()
						}
						if v.end != taskOver {
							_, err := answer.Await(ctx)
							awaited <- err
							return nil
						}
						go func() { _, err := answer.Await(ctx); awaited <- err }()
						<-finish
						return nil
					})
					require.NoError(t, err)
					synctest.Wait() // the Await waits
					if state == "done state made while waiting" {
						_ = taskCtx.Done()
						synctest.Wait()
					}
					select {
					case err := <-awaited:
						t.Fatalf("Await returned %v before the task's ctx ended", err)
					default:
					}
					switch v.end {
					case submitCtxEnds:
						cancel(errBecause)
					case discard:
						go func() { assert.NoError(t, s.Discard(context.Background(), "A")) }()
					case forcedShutdown:
						ended, stop := context.WithCancel(context.Background())
						stop()
						go func() { assert.ErrorIs(t, s.Shutdown(ended), context.Canceled) }()
					case taskOver:
						close(finish)
					}
					err = <-awaited
					require.ErrorIs(t, err, context.Canceled)
					require.ErrorIs(t, taskCtx.Err(), context.Canceled)
					require.ErrorIs(t, seqsched.Cause(taskCtx), v.wantCause)
					close(open)
					_, err = answer.Await(context.Background())
					require.NoError(t, err)
					_, _ = asker.Await(context.Background())
					require.NoError(t, s.Shutdown(context.Background()))
				})
			})
		}
	}
}

var errBecause = errors.New("because")

// A task's ctx kept past the task (handed to a goroutine that outlives it)
// stays done, with Canceled, even once the task's session was forgotten
// and its record made another key's: the ctx reaches only what a recycled
// record keeps.
func TestTaskCtxKeptPastItsSessionsRecordStaysDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[string](t)
		bg := context.Background()
		var kept context.Context
		f, err := seqsched.Submit(bg, s, "a", func(ctx context.Context) (any, error) {
			kept = ctx
			return nil, nil
		})
		require.NoError(t, err)
		_, err = f.Await(bg)
		require.NoError(t, err)
		synctest.Wait() // a's goroutine has retired it: an idle record
		rest, err := seqsched.RecycleIdle(s, "a")
		require.NoError(t, err)
		require.Empty(t, rest)

		// Its done state is made only now, the first time it is asked for.
		select {
		case <-kept.Done():
		default:
			t.Fatal("the kept ctx's Done is not closed")
		}
		require.ErrorIs(t, kept.Err(), context.Canceled)
		require.ErrorIs(t, context.Cause(kept), context.Canceled)
		child, cancel := context.WithCancel(kept)
		defer cancel()
		<-child.Done()
	})
}
