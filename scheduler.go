// Package seqsched runs tasks in order per session, with a priority lane,
// fairly across sessions, and with no goroutine for an idle session.
//
// Servers that talk to many clients need each client's work to run one task
// at a time in the order it was submitted (a WebSocket connection's
// outbound messages, a bank account's operations), urgent work to jump the
// queue, and one chatty client to never starve the rest. A [Scheduler] keys
// tasks by session: each session has a High and a Normal FIFO, gets a
// goroutine only while it has work, and gives way to waiting sessions after
// a bounded number of tasks.
//
//	s, err := seqsched.New[string]()
//	if err != nil { ... }
//	defer s.Shutdown(context.Background())
//
//	f, err := seqsched.Submit(ctx, s, "alice", func(ctx context.Context) (int, error) {
//		return withdraw(ctx, "alice", 50)
//	})
//	if err != nil { ... } // not accepted: ErrClosed, ErrSessionClosing, ErrQueueFull
//	balance, err := f.Await(ctx)
//
//	s.Go(ctx, "alice", freezeAccount, seqsched.High) // runs before alice's queued work
//
// Costs: one allocation per task (the task and its future together, 128
// bytes plus the result), no goroutine per task, no channel unless a future
// is awaited with a cancelable ctx or its Done is called, and no goroutine
// for a session once its queues are empty (only a small record, of which a
// scheduler keeps a bounded number for reuse). BENCHMARKS.md in the
// repository has the measured numbers.
package seqsched

import (
	"context"
	"fmt"
	"hash/maphash"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Scheduler runs tasks keyed by session (K, for example a connection ID or an
// account number), under these rules:
//
//   - Tasks of one session never overlap and start in submission order
//     within a priority; each task happens-before the next of its session.
//   - When a session picks its next task it takes the oldest High task, else
//     the oldest Normal one. A running task is never interrupted. High
//     tasks can starve Normal ones of their own session if they keep coming.
//   - A session gets a goroutine only when it has work, at most one at a
//     time, and gives it up when its queues are empty. Goroutines are
//     reused: without WithMaxConcurrency, a session that gets work while
//     a goroutine is busy with a session near it waits for that goroutine
//     or for a new one, whichever is first, so a burst of new sessions
//     costs few goroutines and a task that blocks delays no other
//     session. An idle session keeps no tasks and no goroutine, only a
//     small record that its key's next task reuses; the scheduler keeps a
//     bounded number of them, and records of keys that stopped coming age
//     out, so memory does not grow with the number of keys ever seen. New
//     starts no goroutine; there are no timers and no polling.
//   - After every WithYieldAfter tasks (a turn; see also WithWeight and
//     WithYieldInterval) a session checks for waiting sessions. Under
//     WithMaxConcurrency it goes to the back of the FIFO ready queue and
//     hands its slot to the head; without a limit it calls runtime.Gosched.
//     A lone session drains without yielding.
//
// Create one with [New]; the zero value is not usable. All methods are safe
// for concurrent use, including from inside tasks. Stop it with
// [Scheduler.Shutdown], which waits for the goroutines it started.
type Scheduler[K comparable] struct {
	opts   options
	seed   maphash.Seed
	shards []shard[K]
	mask   uint64
	// idleCap bounds each shard's idle records (see shard.retire):
	// idleRecords over all shards.
	idleCap int
	slots   slots[K]
	pool    sync.Pool // of *session[K]

	// live counts the scheduler's goroutines plus the sessions waiting in
	// the ready queue: Shutdown is done when it reaches zero. Sessions in
	// a shard's start queue hold no token: while it is not empty, a
	// starter holding one is on its way.
	live      atomic.Int64
	slack     atomic.Int64 // live tokens minus running workers; kept only under checkTokens
	closed    atomic.Bool  // Shutdown began: Submit fails
	forced    atomic.Bool  // Shutdown gave up: no task starts
	quiet     chan struct{}
	quietOnce sync.Once
	closeOnce sync.Once
	cancel    context.CancelFunc // cancels core.force: Shutdown gave up
	core      core               // what tasks need of the scheduler

	yields    atomic.Uint64
	panics    atomic.Uint64
	slowTasks atomic.Uint64

	checkKeys    bool           // K can hold a key a map cannot (see keyCheckNeeded)
	errHandler   func(K, error) // WithErrorHandler, or nil
	weight       func(K) int    // WithWeight, or nil
	weightLogged atomic.Bool    // a bad weight was logged
	hist         *[2]histogram  // queue waits by priority; nil without WithWaitHistogram
	epoch        time.Time      // time origin of task.at
}

// New returns a scheduler configured by opts. It starts no goroutine. An
// out-of-range option makes it return an [*OptionError] wrapping
// [ErrInvalidOption] that names the option and its value.
func New[K comparable](opts ...Option) (*Scheduler[K], error) {
	o, err := newOptions[K](opts)
	if err != nil {
		return nil, err
	}
	n := shardCount(runtime.GOMAXPROCS(0))
	if o.shards > 0 {
		n = o.shards
	}
	s := &Scheduler[K]{
		opts:    o,
		seed:    maphash.MakeSeed(),
		shards:  make([]shard[K], n),
		mask:    uint64(n - 1),
		idleCap: idleRecords / n,
		quiet:   make(chan struct{}),
	}
	var force context.Context
	force, s.cancel = context.WithCancel(context.Background())
	s.core = core{force: force, lender: s}
	s.weight, _ = o.weight.(func(K) int)
	s.errHandler, _ = o.errHandler.(func(K, error))
	s.checkKeys = keyCheckNeeded(reflect.TypeFor[K]())
	if o.waitHistogram {
		s.hist = new([2]histogram)
		s.epoch = time.Now()
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.starterFn = func() { s.runStarter(sh) }
	}
	s.pool.New = func() any {
		sess := &session[K]{}
		sess.core = &s.core
		sess.launch = func() { s.work(sess, nil, nil) }
		return sess
	}
	return s, nil
}

// Submit queues fn as a task on session key and returns its future.
//
// The error is non-nil only when the task was not accepted: [ErrClosed] once
// Shutdown has begun, [ErrSessionClosing] while key is being removed,
// [ErrQueueFull] past WithMaxQueue, a [*KeyError] (wrapping
// [ErrInvalidKey]) for a key a map cannot hold (a NaN, or an interface
// holding a slice, map or func), [ErrNilFunc], [ErrNilContext], or an
// [*OptionError] for a bad [TaskOption]. Submit never blocks.
//
// fn runs on a goroutine of the scheduler with a ctx that carries ctx's
// values and deadline. That ctx is done when ctx is, when Shutdown gives
// up, or once the task is over (its future resolved), whichever comes
// first; it keeps the whole context.Context contract at every moment, so
// it may be kept, watched and derived from on any goroutine. If ctx is
// done before the task starts, fn never runs and the future resolves with
// ctx.Err(). A panic in fn is recovered and resolves the future with a
// [*PanicError]; the session goes on.
//
// A task may queue follow-up work with its own ctx: when ctx is a task's
// ctx itself, the new task inherits the ctx that task was submitted with
// (values, deadline, cancellation), not the end of that task. A ctx
// derived from a task's ctx (WithValue, WithTimeout, ...) ends with that
// task, like any child context; pass context.WithoutCancel(ctx) for work
// that must outlive the task whatever ctx it was given.
func Submit[K comparable, T any](ctx context.Context, s *Scheduler[K], key K,
	fn func(context.Context) (T, error), opts ...TaskOption) (*Future[T], error) {
	if fn == nil {
		return nil, ErrNilFunc
	}
	return submit(ctx, s, nil, key, fn, nil, opts)
}

// Go is Submit for a task with no result. It follows Submit's rules.
func (s *Scheduler[K]) Go(ctx context.Context, key K, fn func(context.Context) error,
	opts ...TaskOption) (*Future[struct{}], error) {
	if fn == nil {
		return nil, ErrNilFunc
	}
	return submit[K, struct{}](ctx, s, nil, key, nil, fn, opts)
}

// submit is Submit and Go: exactly one of fn and fn0 is set (Go's fn is kept
// as it is, so that it needs no wrapper closure). It checks what it can
// before it allocates the task and its future.
func submit[K comparable, T any](ctx context.Context, s *Scheduler[K], h *Session[K], key K,
	fn func(context.Context) (T, error), fn0 func(context.Context) error, opts []TaskOption) (*Future[T], error) {
	prio, err := s.admissible(ctx, h, key, opts)
	if err != nil {
		return nil, err
	}
	f := &Future[T]{fn: fn, fn0: fn0}
	f.t.parent, f.t.prio, f.t.job = submitCtx(ctx), prio, f
	f.wg.Add(1)
	if err := s.queue(h, key, &f.t); err != nil {
		return nil, err
	}
	return f, nil
}

// admissible checks what Submit, Go and Post can check before they
// allocate: the scheduler, ctx, the options, and a key given by value
// (h == nil; a handle's key was checked at Open).
func (s *Scheduler[K]) admissible(ctx context.Context, h *Session[K], key K, opts []TaskOption) (Priority, error) {
	prio, err := s.check(ctx, opts)
	if err == nil && h == nil {
		err = s.validKey(key)
	}
	return prio, err
}

// queue queues t on h's session, or on key's when h is nil.
func (s *Scheduler[K]) queue(h *Session[K], key K, t *task) error {
	if h != nil {
		return s.enqueueTo(h, t)
	}
	return s.enqueue(key, t)
}

// submitCtx is the ctx a new task inherits from ctx: a running task's ctx
// stands for the ctx that task was submitted with, so that work a task
// queues with its own ctx is not canceled because that task ended.
func submitCtx(ctx context.Context) context.Context {
	if t, ok := ctx.(*task); ok {
		return t.parent
	}
	return ctx
}

// check validates what Submit can check before it allocates.
func (s *Scheduler[K]) check(ctx context.Context, opts []TaskOption) (Priority, error) {
	if s == nil || s.shards == nil {
		return 0, notNew
	}
	if ctx == nil {
		return 0, ErrNilContext
	}
	if s.closed.Load() {
		return 0, ErrClosed
	}
	return taskPriority(opts)
}

// notNew is returned for a nil or zero Scheduler, and errNilSession for a
// nil *Session.
var (
	notNew        = ErrNotNew
	errNilSession = fmt.Errorf("seqsched: nil *Session (make one with Open): %w", ErrNotNew)
)

// keyCheckNeeded reports whether a K can be a key that a map cannot hold:
// one not equal to itself (a NaN in a float, a complex, or an array or
// struct holding one) or an interface holding a value whose type is not
// comparable. New decides it once; for every other K the check costs a
// predictable branch.
func keyCheckNeeded(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.Interface:
		return true
	case reflect.Array:
		return t.Len() > 0 && keyCheckNeeded(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if keyCheckNeeded(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// validKey refuses a key that a map cannot hold: a map never finds a NaN
// key again (every task would make a session never forgotten), and hashing
// an interface holding a slice, map or func panics.
func (s *Scheduler[K]) validKey(key K) error {
	if !s.checkKeys {
		return nil
	}
	return checkKey(key)
}

func checkKey[K comparable](key K) (err error) {
	defer func() {
		if r := recover(); r != nil { // comparing an interface holding an uncomparable value
			err = &KeyError{Key: key, Reason: fmt.Sprintf("is not comparable (%v)", r)}
		}
	}()
	if key != key {
		return &KeyError{Key: key, Reason: "is not equal to itself (it is or holds a NaN)"}
	}
	return nil
}

// enqueue appends t to key's session, creating the session if it is idle,
// and schedules the session if it has no goroutine.
func (s *Scheduler[K]) enqueue(key K, t *task) error {
	if s.hist != nil {
		t.at = time.Since(s.epoch).Nanoseconds()
	}
	sh := s.shard(key)
	sh.mu.Lock()
	if s.closed.Load() {
		sh.mu.Unlock()
		return ErrClosed
	}
	sess := sh.sessions[key]
	switch {
	case sess != nil && !sess.scheduled: // idle: active again
		sh.wake(sess)
	case sess == nil:
		sess = sh.make(s, key)
	case sess.drain != nil:
		sh.mu.Unlock()
		return ErrSessionClosing
	}
	return s.admit(sh, sess, t)
}

// enqueueTo is enqueue for a handle's session: no hash, no map lookup.
func (s *Scheduler[K]) enqueueTo(h *Session[K], t *task) error {
	if s.hist != nil {
		t.at = time.Since(s.epoch).Nanoseconds()
	}
	sh := h.sh
	sh.mu.Lock()
	if s.closed.Load() {
		sh.mu.Unlock()
		return ErrClosed
	}
	sess := h.sess
	if sess.gone || sess.drain != nil {
		sh.mu.Unlock()
		return ErrSessionClosing
	}
	if !sess.scheduled {
		sh.wake(sess)
	}
	return s.admit(sh, sess, t)
}

// admit queues t on sess, schedules sess if it has no goroutine, and
// unlocks sh. Called with sh.mu held.
func (s *Scheduler[K]) admit(sh *shard[K], sess *session[K], t *task) error {
	q := &sess.normal
	if t.prio == High {
		q = &sess.high
	}
	if max := s.opts.maxQueue; max > 0 && q.n >= max { // never true of a just-made session
		sh.mu.Unlock()
		return ErrQueueFull
	}
	t.lanes = &sess.lanes
	sh.submitted++
	starter := false // start a starter for sh's start queue
	if !sess.scheduled {
		sess.scheduled = true
		switch {
		case s.opts.maxConcurrency == 0 && sh.workers > 0:
			// A goroutine is at work on this shard: it takes sess when its
			// own session goes idle, or a starter does, whichever is first.
			// sess takes no live token: while the start queue is not
			// empty, a starter is on its way, holding one.
			sh.pending.push(sess)
			if !sh.starterOnWay {
				sh.starterOnWay, starter = true, true
				s.takeToken() // the starter's; under the lock, so Shutdown's barrier sees it
			}
		default:
			s.takeToken() // sess's; under the lock, so Shutdown's barrier sees it
			if s.claimSlot(sess) {
				// The session's only task goes straight to the goroutine
				// that starts now: it is running, not queued, and counts
				// towards WithHighBurst's run as a popped task does.
				sess.first = sess.countStart(t)
				sh.running++
				if s.opts.maxConcurrency == 0 {
					sh.workers++
				}
				sh.mu.Unlock()
				go sess.launch()
				return nil
			}
		}
	}
	q.push(t)
	sh.queued[t.prio]++
	sh.mu.Unlock()
	if starter {
		go sh.starterFn()
	}
	return nil
}

// Remove drains session key and forgets it. At once, further submissions to
// key fail with [ErrSessionClosing]; every task already accepted still runs
// (High first, as usual); then the session is forgotten and Remove returns
// nil. The key can then be used again as a fresh session.
//
// If ctx ends first, Remove returns ctx.Err() and the drain still completes.
// If ctx belongs to a running task of this very session, Remove cannot wait
// for it: it starts the drain and returns [ErrWouldDeadlock]. If a forced
// Shutdown cuts the drain short, Remove returns [ErrClosed]. Removing an
// unknown or idle key returns nil (and drops the idle key's record at
// once). A key a map cannot hold returns a [*KeyError]. When Remove
// returns nil, every task accepted for key has run and its future is
// resolved. Remove is safe for concurrent use; any number of callers may
// remove the same key.
func (s *Scheduler[K]) Remove(ctx context.Context, key K) error {
	if s == nil || s.shards == nil {
		return notNew
	}
	if ctx == nil {
		return ErrNilContext
	}
	if err := s.validKey(key); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	sess := sh.sessions[key]
	if sess == nil {
		sh.mu.Unlock()
		return nil
	}
	return s.remove(ctx, sh, sess)
}

// remove drains and forgets sess (see Remove), and unlocks sh. Called with
// sh.mu held.
func (s *Scheduler[K]) remove(ctx context.Context, sh *shard[K], sess *session[K]) error {
	if !sess.scheduled { // idle: forget it now
		if sess.pins > 0 {
			sh.pinnedIdle--
			sh.forget(sess)
		} else {
			sh.drop(sess)
		}
		sh.mu.Unlock()
		s.recycle(sess)
		return nil
	}
	if sess.drain == nil {
		sess.drain = &drain{done: make(chan struct{})}
	}
	d := sess.drain
	self := runningTask(ctx)
	selfWait := self != nil && self.lanes == &sess.lanes
	sh.mu.Unlock()
	if selfWait {
		return ErrWouldDeadlock
	}
	select {
	case <-d.done:
		return d.err
	case <-ctx.Done():
		select {
		case <-d.done:
			return d.err
		default:
			return ctx.Err()
		}
	}
}

// Shutdown stops the scheduler. At once, every Submit fails with
// [ErrClosed]; every accepted task still runs (tasks cannot add new ones);
// Shutdown returns nil when every goroutine the scheduler started has
// returned.
//
// If ctx ends first, Shutdown gives up: no further task starts (one that a
// goroutine was starting at that instant may still begin, and its ctx is
// canceled like the others), running tasks' contexts are canceled, under
// WithMaxConcurrency a task coming back from an Await no longer waits for a
// slot, every task not yet started resolves with [ErrClosed], and Shutdown
// returns ctx.Err() without waiting for running tasks. Unlike
// http.Server.Shutdown, the give-up is forceful.
//
// Called from a task of this scheduler with that task's ctx (or one derived
// from it), Shutdown begins as above but cannot wait for the task calling
// it: it returns [ErrWouldDeadlock]. Shutdown is safe to call again and
// concurrently: a later call waits again, and returns nil once the
// goroutines are gone.
func (s *Scheduler[K]) Shutdown(ctx context.Context) error {
	if s == nil || s.shards == nil {
		return notNew
	}
	if ctx == nil {
		return ErrNilContext
	}
	self := runningTask(ctx)
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		// Barrier: a Submit that saw closed unset has finished enqueueing.
		for i := range s.shards {
			s.shards[i].mu.Lock()
			s.shards[i].mu.Unlock() //nolint:staticcheck // empty critical section is the point
		}
		s.release(0)
	})
	if self != nil && self.lanes.core == &s.core {
		return ErrWouldDeadlock // the caller's own task keeps the scheduler busy
	}
	select {
	case <-s.quiet:
		return nil
	default:
	}
	select {
	case <-s.quiet:
		return nil
	case <-ctx.Done():
	}
	s.abort()
	return ctx.Err()
}

// abort is Shutdown giving up: cancel running tasks, empty the ready queue and
// every session's queues, and resolve what was dropped with ErrClosed.
func (s *Scheduler[K]) abort() {
	s.forced.Store(true)
	s.cancel()
	// Sessions waiting for a slot have no goroutine: forget them here.
	waiting := s.abortSlots()
	for i := range s.shards {
		sh := &s.shards[i]
		var drop dropped
		var forgotten []*session[K]
		var drains []*drain
		sh.mu.Lock()
		for _, sess := range sh.sessions {
			for t := sess.pop(0); t != nil; t = sess.pop(0) {
				drop.publish(t) // under the lock: a worker that retires sess ends its drain after this
				sh.queued[t.prio]--
				sh.completed[t.prio]++
				sh.skipped++
			}
			if sess.drain != nil {
				sess.drain.err = ErrClosed
			}
		}
		for _, sess := range waiting {
			if sess.sh == sh {
				f, d := sh.retire(sess, s.idleCap)
				if f != nil {
					forgotten = append(forgotten, f)
				}
				if d != nil {
					drains = append(drains, d)
				}
			}
		}
		sh.mu.Unlock()
		drop.finish()
		for _, d := range drains {
			d.end()
		}
		for _, f := range forgotten {
			s.recycle(f)
		}
	}
	s.release(int64(len(waiting)))
}

// release gives back n live tokens and reports the scheduler quiet if that
// was the last after Shutdown began.
func (s *Scheduler[K]) release(n int64) {
	v := s.live.Add(-n)
	if checkTokens && s.slack.Add(-n) < 0 {
		tokenViolations.Add(1) // a worker runs without a token: Shutdown could return under it
	}
	if v == 0 && s.closed.Load() {
		s.quietOnce.Do(func() { close(s.quiet) })
	}
}

// recycle puts a forgotten session back in the pool, unless a handle held
// it: a handle must go on finding it gone.
func (s *Scheduler[K]) recycle(sess *session[K]) {
	if !sess.handled {
		s.pool.Put(sess)
	}
}

// takeToken takes a live token (see live).
func (s *Scheduler[K]) takeToken() {
	s.live.Add(1)
	if checkTokens {
		s.slack.Add(1)
	}
}

// checkTokens, set by the package's own tests, makes every release check
// that the live tokens cover the worker goroutines still running, and
// count in tokenViolations each time they do not. slack keeps tokens minus
// workers in one counter, so that the check reads one consistent value.
var (
	checkTokens     bool
	tokenViolations atomic.Int64
)
