package seqsched

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A *task is the context.Context passed to fn. It carries the submitter's
// values and deadline, and it is done as soon as any of four things
// happens: the submitter's ctx is done, Shutdown gives up, Discard ends the
// task's session, or the task is over (its future resolved). Whichever
// comes first is latched: Err then returns that reason for ever (Cause
// tells ErrDiscarded apart), and Done's channel is closed before Err
// returns it, as the context.Context contract requires at every moment, on
// every goroutine, before and after fn returns.
//
// A task that never asks for Done and never finds its ctx done costs
// nothing here: Err reads the sources; the done state (a channel and the
// watches on the sources) is made the first time it is needed.
//
// The submitter's ctx is user code: every call to it goes through try
// (see callsite.go). A method that panics counts as a canceled ctx; package
// context only ever sees it through a guard that does the same, and that
// reports a Done closed with a nil Err as canceled too.

func (t *task) Deadline() (time.Time, bool) {
	d, perr := try(callDeadline, t.parent)
	if perr != nil {
		return time.Time{}, false
	}
	return d.d, d.ok
}

func (t *task) Done() <-chan struct{} { return t.ctxState().done.Done() }

func (t *task) Err() error {
	if c := t.state(); c != nil {
		if err := c.latched(); err != nil {
			return err
		}
	}
	if err, cause := t.doneReason(); err != nil {
		return t.ctxState().latch(err, cause) // the first reason latched wins
	}
	return nil
}

// state returns t's done state, or nil if it was never made.
func (t *task) state() *ctxState {
	if a := t.aux.Load(); a != nil {
		return a.ctx.Load()
	}
	return nil
}

func (t *task) hasCtxState() bool { return t.state() != nil }

// doneReason looks at the sources of a task's ctx's end and returns the
// error and cause of one that is done, or nil.
func (t *task) doneReason() (err, cause error) {
	if err := parentErr(t.parent); err != nil {
		return err, nil
	}
	if a := t.aux.Load(); a != nil && a.discarded.Load() {
		return context.Canceled, ErrDiscarded
	}
	if t.lanes.core.force.Err() != nil || t.job.resolved() {
		return context.Canceled, nil
	}
	return nil, nil
}

// Value answers the deadlock guard's key with t itself and context's own
// lookup of a cancel state (which context.Cause makes) with the done
// state's, so that Cause is consistent with Err; every other key goes to
// the submitter's ctx.
func (t *task) Value(key any) any {
	if key == (runningKey{}) {
		return t
	}
	if _, ok := key.(*int); ok { // the type of context's cancel-state key
		c := t.state()
		if c == nil {
			if err, _ := t.doneReason(); err != nil {
				c = t.ctxState()
			}
		}
		if c != nil {
			if v := c.done.Value(key); v != nil {
				return v // only context's cancel-state key finds anything there
			}
		}
	}
	v, perr := try(callValue, valueCall{t.parent, key})
	if perr != nil {
		return nil
	}
	return v
}

// AfterFunc lets context.WithCancel and friends derive from a task's ctx
// without starting a goroutine to watch it.
func (t *task) AfterFunc(f func()) func() bool { return context.AfterFunc(t.ctxState().done, f) }

func (t *task) String() string { return "seqsched task ctx" }

// runningKey is the context key under which a task's ctx answers with the
// task itself; the waits use it to spot one that cannot end.
type runningKey struct{}

// runningTask returns the task whose fn ctx (or a ctx derived from it) is
// ctx, if that task is running now; ctx.Value is the caller's code, and a
// panic there is returned. A task's ctx exists only once its fn has
// started, so the task runs until its future resolves; reading that needs
// no flag of its own.
func runningTask(ctx context.Context) (*task, error) {
	v, perr := try(callValue, valueCall{ctx, runningKey{}})
	if perr != nil {
		return nil, perr
	}
	t, _ := v.(*task)
	if t == nil || t.job.resolved() {
		return nil, nil
	}
	return t, nil
}

// ctxState is the done state of a task's ctx (see task.Err).
type ctxState struct {
	err   atomic.Pointer[error] // the latched reason; set before done is closed
	done  context.Context       // canceled, with the latched cause, when err is latched; a child of nothing
	stop  context.CancelCauseFunc
	guard guard // the submitter's ctx as package context sees it

	mu      sync.Mutex
	unwatch []func() bool // the watches on the submitter's ctx and the scheduler's force
	ended   bool          // err is latched: watches made from now on are stopped at once
}

// ctxState returns t's done state, making it if need be. Making it watches
// the submitter's ctx (through the guard) and the scheduler's force, then
// looks at the sources once, so that a source done before the watches
// began is latched before ctxState returns.
func (t *task) ctxState() *ctxState {
	a := t.extra()
	if c := a.ctx.Load(); c != nil {
		return c
	}
	c := &ctxState{guard: guard{p: t.parent}}
	c.guard.c = c
	c.done, c.stop = context.WithCancelCause(context.Background())
	if !a.ctx.CompareAndSwap(nil, c) {
		c.stop(nil)
		return a.ctx.Load()
	}
	var unwatch []func() bool
	if c.guard.Done() != nil {
		unwatch = append(unwatch, context.AfterFunc(&c.guard, c.watch))
	}
	unwatch = append(unwatch, context.AfterFunc(t.lanes.core.force, func() { c.latch(context.Canceled, nil) }))
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
	if err, cause := t.doneReason(); err != nil {
		c.latch(err, cause)
	}
	return c
}

// watch latches the end of the submitter's ctx; it runs on a goroutine of
// package context once that ctx is done (siteCtxWatch). Its Err is user
// code: a panic there reads as Canceled (see guard), and a runtime.Goexit
// latches Canceled on the way out, so the task's ctx ends either way.
func (c *ctxState) watch() {
	read := false
	defer func() {
		if !read {
			c.latch(context.Canceled, nil)
		}
	}()
	err := c.guard.Err()
	read = true
	c.latch(err, nil)
}

// latch makes err (with cause, if not nil) the ctx's reason for being
// done, unless one was latched first, and returns the reason latched. It
// returns once done is closed. Stopping the watches may run the
// submitter's ctx's code (see stopAll).
func (c *ctxState) latch(err, cause error) error {
	if !c.err.CompareAndSwap(nil, &err) {
		return c.latched()
	}
	if cause == nil {
		cause = err
	}
	c.stop(cause)
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

// stopAll stops the watches. A watch on a submitter's ctx that implements
// AfterFunc is stopped by that ctx's own code, and one registered by
// package context may call the ctx's Done and Value: each goes through try,
// and a panic leaves that watch to its ctx.
func stopAll(fs []func() bool) {
	for _, f := range fs {
		try(callStop, f)
	}
}

func callStop(f func() bool) bool { return f() }

// over marks t's ctx done once its future has resolved, if fn made its
// done state; a ctx whose state is made later finds the resolution itself.
// Called after resolve, with no lock held (see siteCtxStop).
func (t *task) over() {
	if c := t.state(); c != nil {
		c.latch(context.Canceled, nil)
	}
}

// discard ends t's ctx with ErrDiscarded as its cause (Discard, while t
// runs). Called with no lock held: stopping the watches may run the
// submitter's ctx's code.
func (t *task) discard() {
	t.extra().discarded.Store(true)
	if c := t.state(); c != nil {
		c.latch(context.Canceled, ErrDiscarded)
	}
}

var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// parentErr is a submitter's ctx's Err, through try: a panic reads as
// Canceled.
func parentErr(ctx context.Context) error {
	err, perr := try(callErr, ctx)
	if perr != nil {
		return context.Canceled
	}
	return err
}

// ctxDone and ctxErr are a caller's ctx's Done and Err, through try.
// ctxErr reads a panic, or a nil Err once Done is closed, as Canceled.
func ctxDone(ctx context.Context) (<-chan struct{}, *PanicError) {
	return try(callDone, ctx)
}

func ctxErr(ctx context.Context) error {
	err, perr := try(callErr, ctx)
	if perr != nil {
		return perr
	}
	if err == nil {
		return context.Canceled
	}
	return err
}

type valueCall struct {
	ctx context.Context
	key any
}

type deadline struct {
	d  time.Time
	ok bool
}

func callErr(ctx context.Context) error             { return ctx.Err() }
func callDone(ctx context.Context) <-chan struct{}  { return ctx.Done() }
func callValue(c valueCall) any                     { return c.ctx.Value(c.key) }
func callDeadline(ctx context.Context) (d deadline) { d.d, d.ok = ctx.Deadline(); return d }
