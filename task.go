package seqsched

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Priority selects the queue a task waits in. It is a [TaskOption]: pass
// [High] to Submit to use the priority lane.
type Priority uint8

const (
	// Normal tasks run in submission order after every queued High task.
	Normal Priority = iota
	// High tasks run before every queued Normal task of their session, in
	// submission order among themselves. They never interrupt a running task.
	High
)

// String returns "Normal", "High", or "Priority(n)" for other values.
func (p Priority) String() string {
	switch p {
	case Normal:
		return "Normal"
	case High:
		return "High"
	}
	return fmt.Sprintf("Priority(%d)", uint8(p))
}

// A TaskOption configures one task at Submit. [Priority] is the only one.
type TaskOption interface {
	isTaskOption()
}

func (Priority) isTaskOption() {}

// taskPriority reads the task options. A type switch, not an interface
// method, keeps the variadic slice on the caller's stack.
func taskPriority(opts []TaskOption) (Priority, error) {
	prio := Normal
	for _, opt := range opts {
		p, ok := opt.(Priority)
		if !ok {
			return 0, &OptionError{Option: fmt.Sprintf("%T", opt), Reason: "must be a Priority"}
		}
		if p > High {
			return 0, &OptionError{Option: p.String(), Reason: "must be Normal or High"}
		}
		prio = p
	}
	return prio, nil
}

// task is the untyped part of a submitted task: the node in its session's
// queue and the context its fn receives (taskctx.go). It is embedded in
// [Future] (and in a posted task), so a task and its future are one
// allocation.
type task struct {
	next   *task           // next in the session's queue
	parent context.Context // the submitter's ctx: values, deadline, cancellation
	lanes  *lanes          // the session it was queued on: its scheduler, and identity for the deadlock guard
	job    job             // the *Future[T] (or *posted[K]) this task belongs to

	aux     atomic.Pointer[taskAux] // made on first need; most tasks never need it
	at      int64                   // when queued, in ns since New; only with WithWaitHistogram
	prio    Priority
	outcome outcome // set with the job's error, before the task is counted
}

// outcome is how a task ended, for Stats: exactly one per task.
type outcome uint8

const (
	outcomeNone      outcome = iota
	outcomeSucceeded         // fn returned nil
	outcomeFailed            // fn returned an error
	outcomePanicked          // fn panicked or called runtime.Goexit
	outcomeSkipped           // never ran: its submit ctx ended (or its Err failed), or a forced Shutdown dropped it
	outcomeDiscarded         // never ran: Discard dropped it
	nOutcomes
)

// taskAux is what few tasks need: the done state of the task's ctx, the
// lent-slot state, and the Discard mark. Kept out of task so that a task
// and its future fit the 128-byte size class.
type taskAux struct {
	ctx       atomic.Pointer[ctxState] // made when fn first asks for Done, or Err finds the ctx done
	lent      atomic.Pointer[lentSlot] // made by the first wait that lends the task's slot
	discarded atomic.Bool              // Discard ended the session while the task ran
}

// extra returns t's taskAux, making it if need be.
func (t *task) extra() *taskAux {
	if a := t.aux.Load(); a != nil {
		return a
	}
	a := new(taskAux)
	if !t.aux.CompareAndSwap(nil, a) {
		a = t.aux.Load()
	}
	return a
}

// lentSlot returns t's lent-slot state, or nil if t never lent its slot.
func (t *task) lentSlot() *lentSlot {
	if a := t.aux.Load(); a != nil {
		return a.lent.Load()
	}
	return nil
}

// core is what a task needs of its scheduler, without the key type.
type core struct {
	force     context.Context // canceled when Shutdown gives up
	owner     owner           // the scheduler, for Await
	callbacks atomic.Int64    // callbacks other than fn running on workers (see callsite.go)
}

// owner is the part of a Scheduler that Await needs: whether a callback
// calls it (see callsite.go), and lending the caller's slot while it waits
// (see WithMaxConcurrency).
type owner interface {
	fromCallback(l *lanes) (deadlock bool, ls *lentSlot)
	limited() bool
	lend(*lentSlot) bool
	reclaim(*lentSlot)
}

// job is the typed half of a task, implemented by *Future[T] and
// *posted[K].
type job interface {
	// exec runs fn (user code) on the calling goroutine with t, the task,
	// as its ctx, and records its result and outcome.
	exec(t *task)
	// settle records err and o as the task's outcome: a skip, a drop, a
	// panic, or a Goexit (staged before fn runs; exec overwrites it).
	settle(err error, o outcome)
	// release lets go of fn and what it captured.
	release()
	// publish makes the outcome visible (resolved, Done, Await) and returns
	// the waiter to wake, if any; wake then wakes every waiter. A worker
	// publishes under its shard lock and wakes after it.
	publish() *waiter
	wake(*waiter)
	// resolved reports whether publish has happened.
	resolved() bool
}

// resolve publishes j's outcome and wakes its waiters.
func resolve(j job) { j.wake(j.publish()) }

// Future is the pending result of a submitted task. It resolves exactly once:
// with fn's result, with a [*PanicError], with [ErrGoexit], or, when the task
// never ran, with its submit ctx's error, [ErrDiscarded] or [ErrClosed]. A
// Future is safe for concurrent use by any number of goroutines.
type Future[T any] struct {
	t   task
	fn  func(context.Context) (T, error)
	fn0 func(context.Context) error // Scheduler.Go's fn, kept apart to avoid a wrapper closure
	val T
	err error
	// signal is nil while nobody waits, a waiter once Done was called,
	// and resolvedWaiter after resolution (the waiter's channel is then closed).
	// A plain pointer swap: cheaper on the hot path than an atomic.Value.
	signal atomic.Pointer[waiter]
	// wg is done at resolution. Await with a ctx that cannot be canceled
	// blocks on it instead of making a channel.
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
// channel is made on the first call; futures nobody waits on never make one.
func (f *Future[T]) Done() <-chan struct{} {
	w := f.signal.Load()
	if w == nil {
		w = &waiter{ch: make(chan struct{})}
		if !f.signal.CompareAndSwap(nil, w) {
			w = f.signal.Load()
		}
	}
	return w.ch
}

// Await waits until the task has run and returns its result. ctx bounds only
// the wait: when ctx ends first, Await returns ctx.Err() unchanged and the
// task still runs. Once the future is resolved, Await returns at once
// whatever ctx's state.
//
// A wait that could never end returns [ErrWouldDeadlock] at once: when ctx
// is (derived from) the ctx of a running task of the session this future's
// task is queued on, or when Await is called from WithErrorHandler's
// function, the logger or WithWeight's function while a worker runs them
// for that session. A task is known by its ctx: pass the task's ctx (or
// one derived from it); with another ctx, Await from a task of the same
// session waits until that ctx ends. Awaiting other sessions' futures
// works normally. Under [WithMaxConcurrency], such an Await gives the
// caller's slot to another session while it waits and takes one back,
// ahead of sessions that have not started, before it returns; the awaiting
// session still runs none of its other tasks meanwhile.
//
// A ctx whose Value, Done or Err panics makes Await return the
// [*PanicError].
func (f *Future[T]) Await(ctx context.Context) (T, error) {
	if f.resolved() {
		return f.val, f.err
	}
	var zero T
	if ctx == nil {
		return zero, ErrNilContext
	}
	root := ctx == context.Background() || ctx == context.TODO() // package context's own: no user code
	var rt *task
	if !root {
		var err error
		if rt, err = runningTask(ctx); err != nil {
			return zero, err
		}
	}
	if rt != nil {
		if heldBehind(f.t.lanes, rt.lanes) {
			return zero, ErrWouldDeadlock
		}
		if o := rt.lanes.core.owner; o.limited() {
			ls := rt.slotState()
			if o.lend(ls) {
				defer o.reclaim(ls)
			}
		}
	} else if c := f.t.lanes.core; c.callbacks.Load() > 0 {
		o := c.owner
		deadlock, ls := o.fromCallback(f.t.lanes)
		if deadlock {
			return zero, ErrWouldDeadlock
		}
		if ls != nil && o.lend(ls) {
			defer o.reclaim(ls)
		}
	}
	if root {
		f.wg.Wait()
		return f.val, f.err
	}
	done, perr := ctxDone(ctx)
	if perr != nil {
		return zero, perr
	}
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
		return zero, ctxErr(ctx)
	}
}

func (f *Future[T]) resolved() bool { return f.signal.Load() == resolvedWaiter }

func (f *Future[T]) exec(t *task) {
	if f.fn0 != nil {
		f.err = f.fn0(t)
	} else {
		f.val, f.err = f.fn(t)
	}
	t.outcome = outcomeSucceeded
	if f.err != nil {
		t.outcome = outcomeFailed
	}
}

func (f *Future[T]) settle(err error, o outcome) { f.err, f.t.outcome = err, o }

func (f *Future[T]) release() { f.fn, f.fn0 = nil, nil }

func (f *Future[T]) publish() *waiter { return f.signal.Swap(resolvedWaiter) }

func (f *Future[T]) wake(w *waiter) {
	if w != nil {
		close(w.ch)
	}
	f.wg.Done()
}
