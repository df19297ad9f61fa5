package seqsched

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
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
// queue and the context its fn receives. It is embedded in [Future], so a
// task and its future are one allocation.
type task struct {
	next   *task           // next in the session's queue, or in a list to resolve
	parent context.Context // the submitter's ctx: values, deadline, cancellation
	lanes  *lanes          // the session it was queued on: its scheduler, and identity for the deadlock guard
	job    job             // the *Future[T] this task belongs to

	aux     atomic.Pointer[taskAux] // made on first need; most tasks never need it
	at      int64                   // when queued, in ns since New; only with WithWaitHistogram
	prio    Priority
	skipped bool // resolved without running (set with job.fail)
}

// taskAux is what few tasks need: the done state of the task's ctx, or
// lent-slot state. Kept out of task so that a task and its future fit the
// 128-byte size class.
type taskAux struct {
	ctx  atomic.Pointer[ctxState] // made when fn first asks for Done, or Err finds the ctx done
	lent atomic.Pointer[lentSlot] // made by the first Await that lends the task's slot
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
	force  context.Context // canceled when Shutdown gives up
	lender lender          // the scheduler, for Await's slot lending
}

// lender is the part of a Scheduler that Await needs to give a task's slot
// away while it waits (see [WithMaxConcurrency]).
type lender interface {
	lend(*task) bool
	reclaim(*task)
}

// lentSlot is the slot state of a task whose fn awaited under a concurrency
// limit; it is guarded by the scheduler's slots.mu.
type lentSlot struct {
	awaiting int32    // Awaits in progress that lent the slot
	lent     bool     // the slot is given away while fn awaits
	finished bool     // fn returned: Awaits neither lend nor take back
	back     *resumer // the queued take-back of the slot, if one waits
}

// job is the typed half of a task, implemented by *Future[T].
type job interface {
	// exec runs fn on the calling goroutine and records its outcome. It
	// returns the recovered panic, if any. If fn calls runtime.Goexit, exec
	// records ErrGoexit and does not return.
	exec() *PanicError
	// fail records err as the outcome of a task that will not run.
	fail(error)
	// publish makes the outcome visible (resolved, Done, Await) and returns
	// the waiter to wake, if any; wake then wakes every waiter. A worker
	// publishes under its shard lock and wakes after it.
	publish() *waiter
	wake(*waiter)
	// report hands a failed outcome to whoever wants it (Post's error
	// handler); called once the outcome is known, with no lock held.
	report()
	// resolved reports whether publish has happened.
	resolved() bool
}

// runningKey is the context key under which a task's ctx answers with the
// task itself; Await and Remove use it to spot waits that cannot end.
type runningKey struct{}

// runningTask returns the task whose fn ctx (or a ctx derived from it) is
// ctx, if that task is running now. A task's ctx exists only once its fn
// has started, so the task runs until its future resolves (which comes
// right after fn returns); reading that needs no flag of its own, which
// saves two locked stores per task.
func runningTask(ctx context.Context) *task {
	t, _ := ctx.Value(runningKey{}).(*task)
	if t == nil || t.job.resolved() {
		return nil
	}
	return t
}

// A *task is the context.Context passed to fn. It carries the submitter's
// values and deadline, and it is done as soon as any of three things
// happens: the submitter's ctx is done, Shutdown gives up, or the task is
// over (its future resolved). Whichever comes first is latched: Err then
// returns that reason for ever, and Done's channel is closed before Err
// returns it, as the context.Context contract requires at every moment,
// on every goroutine, before and after fn returns.
//
// A task that never asks for Done and never finds its ctx done costs
// nothing here: Err reads the three sources; the done state (a channel and
// the watches on the sources) is made the first time it is needed.

func (t *task) Deadline() (time.Time, bool) { return t.parent.Deadline() }

func (t *task) Done() <-chan struct{} { return t.ctxState().done.Done() }

func (t *task) Err() error {
	if a := t.aux.Load(); a != nil {
		if c := a.ctx.Load(); c != nil {
			if err := c.latched(); err != nil {
				return err
			}
		}
	}
	if err := t.doneReason(); err != nil {
		return t.ctxState().latch(err) // the first reason latched wins
	}
	return nil
}

// doneReason looks at the three sources of a task's ctx's end and returns
// the reason of one that is done, or nil.
func (t *task) doneReason() error {
	if t.parent.Err() != nil {
		return parentErr(t.parent)
	}
	if t.lanes.core.force.Err() != nil || t.job.resolved() {
		return context.Canceled
	}
	return nil
}

func (t *task) Value(key any) any {
	if key == (runningKey{}) {
		return t
	}
	return t.parent.Value(key)
}

// AfterFunc lets context.WithCancel and friends derive from a task's ctx
// without starting a goroutine to watch it.
func (t *task) AfterFunc(f func()) func() bool { return context.AfterFunc(t.ctxState().done, f) }

func (t *task) String() string { return fmt.Sprintf("%v.WithValue(seqsched task)", t.parent) }

// ctxState is the done state of a task's ctx (see task.Err).
type ctxState struct {
	err  atomic.Pointer[error] // the latched reason; set before done is closed
	done context.Context       // canceled when err is latched; never a child of anything
	stop context.CancelFunc    // cancels done

	mu      sync.Mutex
	unwatch []func() bool // the watches on the submitter's ctx and the scheduler's force
	ended   bool          // err is latched: watches made from now on are stopped at once
}

// ctxState returns t's done state, making it if need be. Making it watches
// the submitter's ctx and the scheduler's force, then looks at the three
// sources once, so that a source done before the watches began is latched
// before ctxState returns.
func (t *task) ctxState() *ctxState {
	a := t.extra()
	if c := a.ctx.Load(); c != nil {
		return c
	}
	c := new(ctxState)
	c.done, c.stop = context.WithCancel(context.Background())
	if !a.ctx.CompareAndSwap(nil, c) {
		c.stop()
		return a.ctx.Load()
	}
	var unwatch []func() bool
	if t.parent.Done() != nil {
		unwatch = append(unwatch, context.AfterFunc(t.parent, func() { c.latch(parentErr(t.parent)) }))
	}
	unwatch = append(unwatch, context.AfterFunc(t.lanes.core.force, func() { c.latch(context.Canceled) }))
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		stopAll(unwatch)
	} else {
		c.unwatch = unwatch
		c.mu.Unlock()
	}
	// The sources are read after a.ctx was published: resolve stores the
	// resolution before it reads a.ctx, so one of the two latches it.
	if err := t.doneReason(); err != nil {
		c.latch(err)
	}
	return c
}

// parentErr is the submitter's ctx's error. A ctx whose Done is closed
// must have one; a broken ctx that has none counts as canceled, so that
// the task's ctx still keeps the contract.
func parentErr(parent context.Context) error {
	if err := parent.Err(); err != nil {
		return err
	}
	return context.Canceled
}

// latch makes err the ctx's reason for being done, unless one was latched
// first, and returns the reason latched. It returns once done is closed.
func (c *ctxState) latch(err error) error {
	if !c.err.CompareAndSwap(nil, &err) {
		return c.latched()
	}
	c.stop()
	c.mu.Lock()
	unwatch := c.unwatch
	c.unwatch, c.ended = nil, true
	c.mu.Unlock()
	stopAll(unwatch) // a finished task leaves nothing registered on long-lived contexts
	return err
}

// latched returns the latched reason, or nil; a reason is returned only
// once done is closed.
func (c *ctxState) latched() error {
	p := c.err.Load()
	if p == nil {
		return nil
	}
	<-c.done.Done() // latch closes it right after storing the reason
	return *p
}

func stopAll(fs []func() bool) {
	for _, f := range fs {
		f()
	}
}

// resolve publishes j's outcome and wakes its waiters; the caller then
// calls task.over.
func resolve(j job) { j.wake(j.publish()) }

// over marks t's ctx done once its future has resolved, if fn made its
// done state; a ctx whose state is made later finds the resolution itself.
// Called after resolve, with no lock held: stopping the watches may run
// the submitter's ctx's code.
func (t *task) over() {
	if a := t.aux.Load(); a != nil {
		if c := a.ctx.Load(); c != nil {
			c.latch(context.Canceled)
		}
	}
}

// Future is the pending result of a submitted task. It resolves exactly once:
// with fn's result, with a [*PanicError], with [ErrGoexit], or, when the task
// never ran, with its submit ctx's error or [ErrClosed]. A Future is safe for
// concurrent use by any number of goroutines.
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
// When ctx is (derived from) the ctx of a running task of the session this
// future's task is queued on, the wait could never end: Await returns
// [ErrWouldDeadlock] at once. Awaiting other sessions' futures from a task
// works normally. Under [WithMaxConcurrency], such an Await gives the task's
// slot to another session while it waits and takes one back, ahead of
// sessions that have not started, before it returns; the awaiting session
// still runs none of its other tasks meanwhile. Pass the task's ctx (or one
// derived from it) for this to happen.
func (f *Future[T]) Await(ctx context.Context) (T, error) {
	if f.resolved() {
		return f.val, f.err
	}
	var zero T
	if ctx == nil {
		return zero, ErrNilContext
	}
	rt := runningTask(ctx)
	if rt != nil {
		if rt.lanes == f.t.lanes {
			return zero, ErrWouldDeadlock
		}
		if l := rt.lanes.core.lender; l.lend(rt) {
			defer l.reclaim(rt)
		}
	}
	if ctx.Done() == nil {
		f.wg.Wait()
		return f.val, f.err
	}
	select {
	case <-f.Done():
		return f.val, f.err
	case <-ctx.Done():
		if f.resolved() {
			return f.val, f.err
		}
		return zero, ctx.Err()
	}
}

func (f *Future[T]) resolved() bool { return f.signal.Load() == resolvedWaiter }

func (f *Future[T]) exec() (perr *PanicError) {
	t := &f.t
	normal := false
	defer func() {
		f.fn, f.fn0 = nil, nil // let go of what fn captured
		if normal {
			return
		}
		if r := recover(); r != nil {
			perr = &PanicError{Value: r, Stack: debug.Stack()}
			f.err = perr
			return
		}
		f.err = ErrGoexit // runtime.Goexit: the worker's own defer takes over
	}()
	if f.fn0 != nil {
		f.err = f.fn0(t)
	} else {
		f.val, f.err = f.fn(t)
	}
	normal = true
	return nil
}

func (f *Future[T]) fail(err error) {
	f.t.skipped = true
	f.err = err
	f.fn, f.fn0 = nil, nil
}

func (f *Future[T]) publish() *waiter { return f.signal.Swap(resolvedWaiter) }

func (f *Future[T]) wake(w *waiter) {
	if w != nil {
		close(w.ch)
	}
	f.wg.Done()
}
