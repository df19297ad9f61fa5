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
	// signal is nil while nobody waits, the waiter of an Await or of Done
	// while someone does, and resolvedWaiter once resolved.
	signal atomic.Pointer[waiter]
}

// waiter is who is to be woken when a future resolves: Done's channel, to
// close, and an Await's parker, to wake (see parker). Each field is set
// before the waiter is published and never changes.
type waiter struct {
	ch   chan struct{}
	park *parker
}

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
	for {
		w := f.signal.Load()
		if w != nil && w.ch != nil {
			return w.ch
		}
		// Nobody waits, or an Await's parker does: it is kept, to be
		// woken with the channel's close.
		nw := &waiter{ch: make(chan struct{})}
		if w != nil {
			nw.park = w.park
		}
		if f.signal.CompareAndSwap(w, nw) {
			return nw.ch
		}
	}
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
//
// Await allocates nothing, given a task's own ctx as well: the future is
// the task's only allocation.
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
		return f.awaitOn(ctx, caller)
	}
	if !f.wait(ctx) {
		return zero, ctx.Err()
	}
	return f.val, f.err
}

// awaitOn is Await for a caller that runs on caller's worker (a task, or
// a callback): it refuses a wait that could never end, and lends the
// caller's slot while it waits. Apart from Await, so that a wait from
// outside the scheduler, the common one, has no deferred call.
func (f *Future[T]) awaitOn(ctx context.Context, caller *base) (T, error) {
	var zero T
	if f.t.sess.behind(caller) {
		return zero, ErrWouldDeadlock
	}
	if reclaim := caller.core.lend(caller); reclaim != nil {
		defer reclaim()
	}
	if !f.wait(ctx) {
		return zero, ctx.Err()
	}
	return f.val, f.err
}

// wait waits until f resolves, and reports true, or until ctx ends first,
// and reports false. A single waiter parks on a pooled parker; one that
// comes while another waits shares Done's channel.
//
// Given a task's own ctx (what a task passes to Await), wait does not make
// that ctx's done state (a context.WithCancel and watches on the submit ctx
// and the force, made for Done): it parks on the task's done slot instead,
// where end and a later state find it, and watches the submit ctx's and
// the force's channels itself.
func (f *Future[T]) wait(ctx context.Context) bool {
	ps, sp := &f.t.sess.core.parkers, &f.t.sess.spare
	p := sp.take()
	if p == nil {
		p = ps.get()
	}
	if !f.signal.CompareAndSwap(nil, &p.w) {
		if !sp.give(p) {
			ps.put(sp, p)
		}
		if f.resolved() {
			return true
		}
		select {
		case <-f.Done():
			return true
		case <-ctx.Done():
			return f.resolved()
		}
	}
	var done, parent, force <-chan struct{}
	// taken says the wait took a wake-up from p: f's, the only one f
	// sends, unless a stale one came first (see below: a stale one costs
	// a look), so there is none left in p to clear.
	taken := false
	t, _ := ctx.(*task)
	light := t != nil && t.done.CompareAndSwap(nil, &p.light)
	if light {
		parent, force = t.parent.Done(), t.sess.core.givenUp.Done()
	} else {
		done = ctx.Done()
	}
	switch {
	case light:
		for !f.resolved() {
			// A reason latched before the parker was in t's slot left
			// no wake-up: read the sources after parking, as state does.
			if reason, _ := t.reason(); reason != nil {
				break
			}
			select {
			case <-p.ch: // f resolved, or t's ctx ended (end, or a state made since): look again
			case <-parent:
			case <-force:
			}
		}
	case done == nil: // a ctx that never ends: the common wait from outside a task
		for !f.resolved() {
			<-p.ch
			taken = true
		}
	default:
		for !f.resolved() {
			select {
			case <-p.ch:
				continue
			case <-done:
			}
			break
		}
	}
	// Unpark. The future's resolution may still wake p after this (it
	// took p before the swap below failed), as may an end that read t's
	// slot before it was cleared: a parker's user looks again after every
	// wake-up, so a stale one costs a look. A state made since took over
	// t's slot and wakes p when its ctx ends: that parker is left to it,
	// and if it was its session's spare, the next put there makes another.
	if !f.resolved() { // else its signal is resolvedWaiter for ever
		f.signal.CompareAndSwap(&p.w, nil)
	}
	if !light || t.done.CompareAndSwap(&p.light, nil) {
		if !taken {
			select {
			case <-p.ch:
			default:
			}
		}
		if !sp.give(p) {
			ps.put(sp, p)
		}
	} else {
		sp.leave(p)
	}
	return f.resolved()
}

// parker is what an Await waits on without making a channel: ch holds one
// wake-up, sent without blocking once what it announces is visible (a
// future resolved, a task's ctx ended); its waiter receives, then looks at
// every condition again. So a wake-up is never lost (a full ch already
// holds one that the waiter has yet to take), and a stale one, sent to a
// parker that went back to the pool and came out again, costs its new
// user one look. w is the parker as a future's waiter, light as a task's
// done state (see task.state); both are fixed when the parker is made.
type parker struct {
	ch    chan struct{}
	w     waiter
	light doneState
}

// parkers holds a scheduler's parkers between waits. A parker is made by
// the first wait that finds none, and only that scheduler's waits use it
// again: a scheduler started in a testing/synctest bubble is used in it,
// and so its parkers' channels belong to it, and a wait on them is one the
// bubble knows is blocked.
//
// Each session record keeps one parker aside (base.spare, reached through
// the awaited task), taken and given back with one atomic operation on a
// flag each; the pool, whose per-P bookkeeping costs several times that,
// holds the rest. A round trip (a task submitted, then awaited) uses its
// own key's spare. The task may resolve, and its record be forgotten and
// made another key's, while its Await still holds the parker: the record
// keeps its spare when it is recycled, so the parker goes back there all
// the same.
type parkers struct{ pool sync.Pool }

// spareParker is a session record's spare parker: made by the first wait
// that puts a parker back to a record with none, it stays the record's
// until a wait leaves it to a task's done state (leave), and free says
// whether a wait may take it. Whoever swaps free from true to false owns
// it until it stores true again. A flag, not a pointer swapped in and
// out: a pointer's atomic write is a runtime call (for the write barrier),
// two on every Await.
type spareParker struct {
	p    atomic.Pointer[parker] // set by put when nil, cleared by leave
	free atomic.Bool
}

// take takes sp's parker, or returns nil when another wait holds it or
// none is made: the wait then gets one from the pool (parkers.get). give
// gives it back, and reports false for a parker that is not sp's: the wait
// then puts that one back (parkers.put). take and give are inlined in a
// wait.
func (sp *spareParker) take() *parker {
	if sp.free.Swap(false) {
		return sp.p.Load()
	}
	return nil
}

func (sp *spareParker) give(p *parker) bool {
	if sp.p.Load() != p {
		return false
	}
	sp.free.Store(true)
	return true
}

// leave lets go of p, which a wait leaves to a task's done state: if it
// is sp's parker (taken, so no other wait looks at it), sp has none until
// the next put makes one.
func (sp *spareParker) leave(p *parker) {
	if sp.p.Load() == p {
		sp.p.Store(nil)
	}
}

// get takes a parker from the pool, or makes one.
func (ps *parkers) get() *parker {
	if p, ok := ps.pool.Get().(*parker); ok {
		return p
	}
	p := &parker{ch: make(chan struct{}, 1)}
	p.w.park, p.light.park = p, p
	return p
}

// put gives back p, which is not sp's parker: it becomes sp's if sp has
// none, else it goes to the pool.
func (ps *parkers) put(sp *spareParker, p *parker) {
	if sp.p.Load() == nil && sp.p.CompareAndSwap(nil, p) {
		sp.free.Store(true)
		return
	}
	ps.pool.Put(p)
}

// wake gives p a wake-up, unless it holds one.
func (p *parker) wake() {
	select {
	case p.ch <- struct{}{}:
	default:
	}
}

// resolved reports whether f's outcome is published: its signal, not its
// task's flag (set just before), so that Done returns a closed channel
// once resolved says so.
func (f *Future[T]) resolved() bool { return f.signal.Load() == resolvedWaiter }

func (f *Future[T]) exec(t *task, ctx context.Context) {
	var err error
	if f.fn0 != nil {
		err = f.fn0(ctx)
	} else {
		f.val, err = f.fn(ctx)
	}
	// f.err is stored only when it changes: a pointer store costs a write
	// barrier while the GC marks, and it is nil unless an interceptor's
	// next ran fn before.
	if err != nil || f.err != nil {
		f.err = err
	}
	t.outcome = outcomeSucceeded
	if err != nil {
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

// wake wakes who waits on a future that publish resolved: it closes
// Done's channel, and gives an Await's parker a wake-up.
func (w *waiter) wake() {
	if w.ch != nil {
		close(w.ch)
	}
	if w.park != nil {
		w.park.wake()
	}
}

func (f *Future[T]) failure() error { return nil }
func (f *Future[T]) result() error  { return f.err }

// posted is a task with no future (Post): its failure goes to the error
// handler or the log (see report.go), with the key its session knows.
type posted struct {
	t   task
	fn  func(context.Context) error
	err error
}

func (p *posted) exec(t *task, ctx context.Context) {
	err := p.fn(ctx)
	if err != nil || p.err != nil { // stored only when it changes: see Future.exec
		p.err = err
	}
	t.outcome = outcomeSucceeded
	if err != nil {
		t.outcome = outcomeFailed
	}
}

func (p *posted) conclude(err error) {
	p.err, p.t.outcome = err, outcomeSucceeded
	if err != nil {
		p.t.outcome = outcomeFailed
	}
}

func (p *posted) fail(err error, o outcome) { p.err, p.t.outcome = err, o }
func (p *posted) publish() *waiter          { p.fn = nil; return nil }
func (p *posted) failure() error            { return p.err }
func (p *posted) result() error             { return p.err }
