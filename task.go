package seqsched

import (
	"context"
	"fmt"
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

// A TaskOption configures one task at Submit, Go or Post: its [Priority]
// ([High] or [Normal]), [HaltOnError], [Replace] and [WaitForRoom]. Later
// options of one kind override earlier ones.
type TaskOption interface {
	isTaskOption()
}

func (Priority) isTaskOption() {}

// taskFlag is a TaskOption that sets a bit of task.flags.
type taskFlag uint8

// The bits of task.flags.
const (
	flagHalt   taskFlag = 1 << iota // HaltOnError
	flagWait                        // WaitForRoom
	flagTagged                      // queued under a Replace tag: pick looks for its replacement
)

func (taskFlag) isTaskOption() {}

func (f taskFlag) String() string {
	switch f {
	case flagHalt:
		return "HaltOnError"
	case flagWait:
		return "WaitForRoom"
	}
	return fmt.Sprintf("taskFlag(%d)", uint8(f))
}

// HaltOnError halts the task's session if the task fails: if fn returns an
// error, panics or calls runtime.Goexit, the session pauses before its next
// task, as [Scheduler.Pause] does, and stays paused until
// [Scheduler.Resume] (or Discard). The halt is reported with the key, once:
// the error handler (or the log, at Error) gets a [*HaltError] that wraps
// both [ErrHalted] and the task's error; a posted task's failure is not
// reported a second time. A task that never ran (its ctx ended first,
// Discard or the give-up (Close, or a Shutdown whose ctx ended) dropped
// it, a newer one replaced it) halts nothing, and neither does one whose
// session Discard ended while it ran: there is no session left to halt,
// and its failure is reported as any other. [WithHaltOnError] sets it for every task.
//
// It is how "withdraw 50, deposit 100, withdraw 150" stops at the first
// failed withdrawal until an operator has looked at the account.
var HaltOnError TaskOption = flagHalt

// WaitForRoom makes Submit, Go and Post wait for room in a session's lane
// that holds [WithMaxQueue] tasks, instead of returning [ErrQueueFull]:
// callers waiting for room in one lane of one session get it in the order
// they came, as the session's worker takes tasks off that lane. The wait
// ends with ctx's error if ctx ends first (the task is then not accepted),
// with [ErrClosed] when Shutdown or Close begins, and with a
// [*SessionError] wrapping [ErrSessionClosing] when the session is
// removed, discarded or closed. Given the ctx of a task or callback of the
// session itself, which could never make room, it returns
// [ErrWouldDeadlock] at once; under [WithMaxConcurrency] a task of another
// session lends its slot while it waits, as [Future.Await] does. Without
// WithMaxQueue it changes nothing, and like every wait it reads ctx only
// when it has to wait.
//
// A producer that fans out to many keys waits behind the first full lane
// it meets: one paused or slow key stalls its posts to every other key.
// Give each post a deadline of its own, which its task shares (a message
// not queued, or not started, in time is stale anyway, and is dropped), so
// that a stuck key costs the producer that long at most:
//
//	for _, key := range keys {
//		ctx, cancel := context.WithTimeout(ctx, time.Second)
//		err := s.Post(ctx, key, func(ctx context.Context) error {
//			defer cancel()
//			return deliver(ctx, key, msg)
//		}, seqsched.WaitForRoom)
//		if err != nil {
//			cancel() // not accepted: ctx's error, after a second at most
//		}
//	}
//
// Or post without WaitForRoom to the keys known to be slow ([Scheduler.Queued],
// or an [ErrQueueFull] seen before), and handle ErrQueueFull there.
var WaitForRoom TaskOption = flagWait

// Replace tags a task for latest-wins delivery: a task of the same session,
// priority and tag that is queued and not yet started is replaced by this
// one. The replaced task resolves with [ErrReplaced] without running (a
// replaced Post's failure is reported like any other, logged at Debug
// without an error handler), and the new one takes its place in the queue:
// a stream of updates is never pushed to the back by its own newer values,
// so the latest one runs no later than the first unrun one would have. A
// replacement takes no room under [WithMaxQueue]. A running task is never
// replaced; the tag is free again once its task starts. A task starts when
// its session's goroutine takes it to run, not when it is accepted: of two
// tasks of one tag submitted in a row to an idle key, only the second runs
// (unless the key's worker was starting the first at that instant). Use it
// for what is stale once a newer value exists: presence, typing
// indicators, a cursor, the latest price for a slow client. An empty tag
// makes Submit return an [*OptionError].
func Replace(tag string) TaskOption { return replaceOption{tag} }

type replaceOption struct{ tag string }

func (replaceOption) isTaskOption() {}

func (o replaceOption) String() string { return fmt.Sprintf("Replace(%q)", o.tag) }

// spec is a task's options, read by taskSpec.
type spec struct {
	prio  Priority
	flags taskFlag
	tag   string // Replace's, or ""
}

// taskSpec reads the task options. A type switch, not an interface
// method, keeps the variadic slice on the caller's stack.
func taskSpec(opts []TaskOption) (spec, error) {
	var sp spec
	for _, opt := range opts {
		switch o := opt.(type) {
		case Priority:
			if o > High {
				return sp, &OptionError{Option: o.String(), Reason: "must be Normal or High"}
			}
			sp.prio = o
		case taskFlag:
			if o != flagHalt && o != flagWait {
				return sp, &OptionError{Option: o.String(), Reason: "must be HaltOnError or WaitForRoom"}
			}
			sp.flags |= o
		case replaceOption:
			if o.tag == "" {
				return sp, &OptionError{Option: o.String(), Reason: "must name a tag"}
			}
			sp.tag = o.tag
		default:
			return sp, &OptionError{Option: fmt.Sprintf("%T", opt),
				Reason: "must be a Priority, HaltOnError, WaitForRoom or Replace"}
		}
	}
	return sp, nil
}

// outcome is how a task ended, for Stats: exactly one per task.
type outcome uint8

const (
	outcomeNone      outcome = iota
	outcomeSucceeded         // fn returned nil
	outcomeFailed            // fn returned an error
	outcomePanicked          // fn panicked or called runtime.Goexit
	outcomeSkipped           // never ran: its submit ctx ended, or the give-up dropped it
	outcomeDiscarded         // never ran: Discard dropped it
	outcomeReplaced          // never ran: a newer task with its Replace tag took its place
	nOutcomes
)

// task is the untyped part of a submitted task: its place in its session's
// queue, and the context.Context its fn receives. It is embedded in a
// [Future] (or a posted task), so that a task and its future are one
// allocation.
//
// A task's life: queued (in a session's FIFO), then taken by the session's
// goroutine (advance, under the shard lock: only then has it started, for
// Pause and Replace), which runs or skips it (runTask), resolves it
// (resolve, under the shard lock, then its waiter's wake) and ends its
// ctx (end). A task that Discard, the give-up or Replace drops is
// resolved where it is dropped.
type task struct {
	next    *task           // next in its session's FIFO
	parent  context.Context // the submit ctx: values, deadline, cancellation
	sess    *base           // the session it was queued on: the scheduler, and identity for re-entry
	job     job             // the *Future[T] or *posted this task belongs to
	done    atomic.Pointer[doneState]
	at      int64 // when queued, in ns since New; only with WithWaitHistogram
	prio    Priority
	outcome outcome  // set with the job's error, before the task is counted
	flags   taskFlag // HaltOnError, WaitForRoom, tagged
	// resolved is set by resolve, just before the job publishes its
	// outcome and well before its waiters are woken.
	resolved atomic.Bool
}

// job is the typed half of a task, implemented by *Future[T] and *posted.
type job interface {
	// exec runs fn on the calling goroutine with ctx (t, or what an
	// interceptor made of it) and records its result and outcome.
	exec(t *task, ctx context.Context)
	// conclude records err, an interceptor's return, as the task's error
	// and outcome.
	conclude(err error)
	// fail records err and o as the task's outcome: a skip, a drop, a
	// panic or a Goexit.
	fail(err error, o outcome)
	// publish makes a future's outcome visible to Done and Await and lets
	// go of fn; it returns who waits, if anyone, to wake (waiter.wake).
	// Called by task.resolve only.
	publish() *waiter
	// failure is a posted task's error, for the report; nil
	// for a future or a posted task that succeeded.
	failure() error
	// result is the task's error, nil if it succeeded.
	result() error
}

// resolve makes t's outcome, which its job recorded, visible: resolved
// first (callerOf and the ctx's reason read it), then the job's publish;
// it returns who waits on the future, if anyone, to wake (waiter.wake). A
// worker resolves under its shard lock and wakes after it, or, going from
// one task of a run to the next, with no lock held (run.go). Apart from
// publish, so that a future's publish is small enough to be inlined in
// the generic wrapper the interface call goes through.
func (t *task) resolve() *waiter {
	t.resolved.Store(true)
	return t.job.publish()
}

// The task as fn's context.Context. It carries the submit ctx's values and
// deadline, and it is done as soon as one of four things happens: the
// submit ctx is done, Shutdown gives up, Discard ends the task's session,
// or the task is over (its future resolved). The first reason is latched:
// Err returns it for ever, and Done's channel is closed before Err returns
// it, as the context.Context contract requires.
//
// A task whose fn never asks for Done costs nothing here: Err reads the
// sources. The done state (a channel, and watches on the submit ctx and the
// scheduler's force) is made the first time it is needed. Package context
// derives from a task's ctx through its documented AfterFunc hook, so a
// child context starts no goroutine.

// doneState is the done state of a task's ctx: ctx, a context of package
// context's own, is canceled when the reason is latched, so that contexts
// derived from the task's register with it and start no goroutine.
//
// An Await given the task's own ctx does not make one: it parks a light
// state, a parker's (ctx nil, park set, nothing else), in the task's done
// slot while it waits, so that end wakes it; a state made meanwhile takes
// the slot over, and the parker with it, and wakes it when latched.
type doneState struct {
	ctx    context.Context
	cancel context.CancelFunc
	park   *parker // an Await's, to wake when latched; or nil
	mu     sync.Mutex
	err    error // the latched reason; set, under mu, as ctx is canceled
	cause  error // and its cause, for Cause: ErrDiscarded, or the submit ctx's
	closed bool
	stops  []func() bool // the watches on the submit ctx and the force
}

// light reports whether d is a parker's light state.
func (d *doneState) light() bool { return d.ctx == nil }

// Deadline returns the submit ctx's deadline.
func (t *task) Deadline() (time.Time, bool) { return t.parent.Deadline() }

// Done returns a channel closed when the task's ctx ends.
func (t *task) Done() <-chan struct{} { return t.state().ctx.Done() }

// Err returns nil while the task's ctx is live, then the reason it ended.
func (t *task) Err() error {
	if d := t.done.Load(); d != nil {
		if err := d.latched(); err != nil {
			return err
		}
	}
	// A source may have ended before the watch or end latched it (the
	// future resolves before its task's ctx is ended): latch it here, so
	// that Err is never nil once a reason holds.
	if reason, cause := t.reason(); reason != nil {
		d := t.state()
		d.latch(reason, cause)
		return d.latched()
	}
	return nil
}

// Value answers runningKey with the task itself (see callerOf); every
// other key goes to the submit ctx.
func (t *task) Value(key any) any {
	if key == (runningKey{}) {
		return t
	}
	return t.parent.Value(key)
}

// AfterFunc is package context's documented hook: a context derived from a
// task's ctx registers here instead of starting a goroutine to watch it.
func (t *task) AfterFunc(f func()) func() bool {
	return context.AfterFunc(t.state().ctx, f)
}

func (t *task) String() string { return "seqsched.task" }

// reason returns why the task's ctx is done, or nil, and its cause: the
// submit ctx's error (and cause), or Canceled once the session was
// discarded (ErrDiscarded), Shutdown gave up or the task is over.
func (t *task) reason() (err, cause error) {
	if err := t.parent.Err(); err != nil {
		return err, context.Cause(t.parent)
	}
	if t.sess.discarded(t) {
		return context.Canceled, ErrDiscarded
	}
	if t.resolved.Load() || t.sess.core.gaveUp.Load() {
		return context.Canceled, context.Canceled
	}
	return nil, nil
}

// state returns t's done state, making it if need be: it watches the
// submit ctx and the force, then reads the sources once, so that a source
// that ended before the watches began is latched before state returns.
func (t *task) state() *doneState {
	old := t.done.Load()
	if old != nil && !old.light() {
		return old
	}
	d := new(doneState)
	d.ctx, d.cancel = context.WithCancel(context.Background())
	for {
		d.park = nil
		if old != nil {
			d.park = old.park // take the waiting Await's parker over
		}
		if t.done.CompareAndSwap(old, d) {
			break
		}
		if old = t.done.Load(); old != nil && !old.light() {
			d.cancel()
			return old
		}
	}
	var stops []func() bool
	if t.parent.Done() != nil {
		stops = append(stops, context.AfterFunc(t.parent, func() { d.latch(t.parent.Err(), context.Cause(t.parent)) }))
	}
	stops = append(stops, context.AfterFunc(t.sess.core.givenUp, func() { d.latch(context.Canceled, context.Canceled) }))
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		stopAll(stops)
	} else {
		d.stops = stops
		d.mu.Unlock()
	}
	// Read after publishing d: end and discard store their mark before
	// they read t.done, so one of the two latches it.
	if reason, cause := t.reason(); reason != nil {
		d.latch(reason, cause)
	}
	return d
}

// latch makes err the reason the ctx ended, and cause its cause, unless
// one was latched first, closes Done's channel (before Err can return the
// reason: both under mu) and stops the watches.
func (d *doneState) latch(err, cause error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed, d.err, d.cause = true, err, cause
	d.cancel()
	stops := d.stops
	d.stops = nil
	d.mu.Unlock()
	stopAll(stops) // a finished task leaves nothing registered on long-lived contexts
	if d.park != nil {
		d.park.wake()
	}
}

// latched returns the latched reason, or nil.
func (d *doneState) latched() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// latchedCause returns the latched reason's cause, or nil.
func (d *doneState) latchedCause() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cause
}

func stopAll(stops []func() bool) {
	for _, stop := range stops {
		stop()
	}
}

// end marks t's ctx done once its future is resolved, if fn made its done
// state, or wakes the Await parked in its slot; a state made later finds
// the resolution itself.
func (t *task) end() {
	if d := t.done.Load(); d != nil {
		if d.light() {
			d.park.wake()
			return
		}
		cause := context.Canceled
		if t.sess.discarded(t) {
			cause = ErrDiscarded
		}
		d.latch(context.Canceled, cause)
	}
}

// runningKey is the context key under which a task's ctx, and the ctx a
// callback is given, answer with who runs: the task, or the callback.
type runningKey struct{}

// callbackCtx is the ctx WithErrorHandler's function and the logger are
// given: it never ends, carries no values but runningKey, and says which
// session's worker runs the callback while it runs.
type callbackCtx struct {
	context.Context // context.Background()
	sess            *base
	active          atomic.Bool
}

func (c *callbackCtx) Value(key any) any {
	if key == (runningKey{}) {
		return c
	}
	return nil
}

// callerOf returns the session whose worker runs the holder of ctx now:
// a running task's, when ctx is (derived from) that task's ctx, or a
// callback's while it runs. It is how the waits know re-entry, by ctx
// alone.
func callerOf(ctx context.Context) *base {
	switch r := ctx.Value(runningKey{}).(type) {
	case *task:
		if !r.resolved.Load() {
			return r.sess
		}
	case *callbackCtx:
		if r.active.Load() {
			return r.sess
		}
	}
	return nil
}

// submitCtx is the ctx a new task inherits from ctx: a running task's ctx
// stands for the ctx that task was submitted with, so that work a task
// queues with its own ctx does not end because that task ended.
func submitCtx(ctx context.Context) context.Context {
	if t, ok := ctx.(*task); ok {
		return t.parent
	}
	return ctx
}

// Cause returns [ErrDiscarded] when ctx is (derived from) the ctx of a task
// whose session [Scheduler.Discard] ended while it ran, and
// context.Cause(ctx) otherwise. A task's ctx is a context of its own
// implementation, so package context cannot report the cause itself. As
// Err does, Cause keeps the first reason: a task's ctx that Discard ended
// reports ErrDiscarded for ever, even once its submit ctx ends too, and
// one whose submit ctx ended first reports that ctx's cause.
func Cause(ctx context.Context) error {
	t, ok := ctx.Value(runningKey{}).(*task)
	if !ok {
		return context.Cause(ctx)
	}
	if ctx.Done() == t.Done() { // the task's ctx, or one that only adds values
		if t.Err() == nil {
			return nil
		}
		return t.state().latchedCause()
	}
	cause := context.Cause(ctx)
	if cause == context.Canceled && t.sess.discarded(t) {
		return ErrDiscarded
	}
	return cause
}
