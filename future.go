package seqsched

import (
	"context"
	"sync"
	"sync/atomic"
)

// Future is the pending result of a submitted task. It resolves exactly
// once: with fn's result, with a [*PanicError], with [ErrGoexit], or, when
// the task never ran, with its submit ctx's error, [ErrDiscarded] or
// [ErrClosed]. A Future is safe for concurrent use by any number of
// goroutines.
type Future[T any] struct {
	t   task
	fn  func(context.Context) (T, error)
	fn0 func(context.Context) error // Scheduler.Go's fn, kept apart to avoid a wrapper closure
	val T
	err error
	// signal is nil while nobody waits on Done, a waiter once Done was
	// called, and resolvedWaiter once resolved (the waiter's channel is
	// then closed).
	signal atomic.Pointer[waiter]
	// wg is done at resolution: an Await whose ctx cannot end blocks on it
	// instead of making a channel.
	wg sync.WaitGroup
}

// waiter holds the channel Done returns.
type waiter struct{ ch chan struct{} }

// resolvedWaiter is stored in every resolved future's signal.
var resolvedWaiter = func() *waiter {
	w := &waiter{ch: make(chan struct{})}
	close(w.ch)
	return w
}()

// Done returns a channel that is closed when the future resolves. The
// channel is made on the first call; futures nobody waits on never make
// one. Done of a nil or zero Future returns a closed channel; its Await
// says why.
func (f *Future[T]) Done() <-chan struct{} {
	if f == nil || f.t.sess == nil {
		return resolvedWaiter.ch
	}
	w := f.signal.Load()
	if w == nil {
		w = &waiter{ch: make(chan struct{})}
		if !f.signal.CompareAndSwap(nil, w) {
			w = f.signal.Load()
		}
	}
	return w.ch
}

// Await waits until the task has run and returns its result. ctx bounds
// only the wait: when ctx ends first, Await returns ctx.Err() unchanged and
// the task still runs. Once the future is resolved, Await returns at once
// whatever ctx's state. A nil or zero Future returns [ErrNotNew], and a nil
// ctx [ErrNilContext].
//
// A wait that could never end returns [ErrWouldDeadlock] at once: when ctx
// is (derived from) the ctx of a running task of the session this future's
// task is queued on (or of a session that waits behind it), or the ctx a
// callback was given while a worker runs it for that session (see
// [WithErrorHandler]). A task is known by its ctx alone: with another ctx,
// Await from a task of the same session waits until that ctx ends.
// Awaiting other sessions' futures works normally. Under
// [WithMaxConcurrency], an Await given a task's (or callback's) ctx lends
// the caller's slot while it waits and takes one back, ahead of sessions
// that have not started, before it returns; the awaiting session still runs
// none of its other tasks meanwhile.
func (f *Future[T]) Await(ctx context.Context) (T, error) {
	var zero T
	if f == nil || f.t.sess == nil {
		return zero, ErrNotNew
	}
	if f.resolved() {
		return f.val, f.err
	}
	if ctx == nil {
		return zero, ErrNilContext
	}
	if caller := callerOf(ctx); caller != nil {
		if f.t.sess.behind(caller) {
			return zero, ErrWouldDeadlock
		}
		if reclaim := caller.core.lend(caller); reclaim != nil {
			defer reclaim()
		}
	}
	done := ctx.Done()
	if done == nil {
		f.wg.Wait()
		return f.val, f.err
	}
	select {
	case <-f.Done():
		return f.val, f.err
	case <-done:
		if f.resolved() {
			return f.val, f.err
		}
		return zero, ctx.Err()
	}
}

func (f *Future[T]) resolved() bool { return f.signal.Load() == resolvedWaiter }

func (f *Future[T]) exec(t *task, ctx context.Context) {
	if f.fn0 != nil {
		f.err = f.fn0(ctx)
	} else {
		f.val, f.err = f.fn(ctx)
	}
	t.outcome = outcomeSucceeded
	if f.err != nil {
		t.outcome = outcomeFailed
	}
}

func (f *Future[T]) conclude(err error) {
	f.err, f.t.outcome = err, outcomeSucceeded
	if err != nil {
		f.t.outcome = outcomeFailed
	}
}

func (f *Future[T]) fail(err error, o outcome) { f.err, f.t.outcome = err, o }

func (f *Future[T]) publish() *waiter {
	f.fn, f.fn0 = nil, nil // let go of what fn captured
	return f.signal.Swap(resolvedWaiter)
}

func (f *Future[T]) wake(w *waiter) {
	if w != nil {
		close(w.ch)
	}
	f.wg.Done()
}

func (f *Future[T]) failure() error { return nil }
func (f *Future[T]) result() error  { return f.err }

// posted is a task with no future (Post): its failure goes to the error
// handler or the log (see report.go).
type posted[K comparable] struct {
	t    task
	fn   func(context.Context) error
	err  error
	key  K
	done atomic.Bool
}

func (p *posted[K]) exec(t *task, ctx context.Context) {
	p.err = p.fn(ctx)
	t.outcome = outcomeSucceeded
	if p.err != nil {
		t.outcome = outcomeFailed
	}
}

func (p *posted[K]) conclude(err error) {
	p.err, p.t.outcome = err, outcomeSucceeded
	if err != nil {
		p.t.outcome = outcomeFailed
	}
}

func (p *posted[K]) fail(err error, o outcome) { p.err, p.t.outcome = err, o }
func (p *posted[K]) publish() *waiter          { p.fn = nil; p.done.Store(true); return nil }
func (p *posted[K]) wake(*waiter)              {}
func (p *posted[K]) resolved() bool            { return p.done.Load() }
func (p *posted[K]) failure() error            { return p.err }
func (p *posted[K]) result() error             { return p.err }
