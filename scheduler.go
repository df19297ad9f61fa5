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
//
// Every function the scheduler is given (fn, a ctx's methods, the logger,
// the weight function, the error handler) may panic, call runtime.Goexit,
// block, or call back into the scheduler: nothing is lost, the scheduler
// stays usable, and a call that would wait for the goroutine it runs on
// returns [ErrWouldDeadlock] instead.
package seqsched

import (
	"context"
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
//     tasks can starve Normal ones of their own session if they keep coming
//     (see WithHighBurst).
//   - A session gets a goroutine only when it has work, at most one at a
//     time, and gives it up when its queues are empty; a task that blocks
//     delays no other session. An idle session keeps no goroutine and no
//     tasks, and memory does not grow with the number of keys ever seen.
//     New starts no goroutine; there are no timers and no polling.
//   - After every WithYieldAfter tasks (a turn; see also WithWeight and
//     WithYieldInterval) a session checks for waiting sessions. Under
//     WithMaxConcurrency it goes to the back of the FIFO ready queue and
//     hands its slot to the head; without a limit it calls runtime.Gosched.
//     A lone session drains without yielding.
//
// Create one with [New]; the zero value is not usable. All methods are safe
// for concurrent use, including from inside tasks and every callback. Stop
// it with [Scheduler.Shutdown], which waits for the goroutines it started.
type Scheduler[K comparable] struct {
	opts    options
	seed    maphash.Seed
	shards  []shard[K]
	mask    uint64
	idleCap int // each shard's idle records (see keepIdle): idleRecords over all shards
	slots   slots[K]
	pool    sync.Pool // of *session[K]
	workers sync.Pool // of *worker[K]

	// live counts the live tokens: one per worker, and one per session
	// waiting in the ready queue (see the design comment on type worker
	// and on activate). Shutdown is done when it reaches zero. Sessions in
	// a shard's start queue hold none: while it is not empty, a starter
	// holding one is on its way. A token is taken under the lock that
	// publishes what holds it, so Shutdown's barrier (closed set, then
	// every shard lock taken once) sees every token a Submit that saw
	// closed unset takes; a worker gives its token back as its last act.
	live      atomic.Int64
	slack     atomic.Int64 // live tokens minus running workers; kept only under checkTokens
	closed    atomic.Bool  // Shutdown began: Submit fails
	forced    atomic.Bool  // Shutdown gave up: no task starts
	quiet     chan struct{}
	quietOnce sync.Once
	closeOnce sync.Once
	cancel    context.CancelFunc // cancels core.force: Shutdown gave up
	core      core               // what tasks need of the scheduler
	callbacks atomic.Int64       // callbacks other than fn running on workers (see callsite.go)

	yields    atomic.Uint64
	slowTasks atomic.Uint64

	checkKeys    bool           // K can hold a key a map cannot (see keyCheckNeeded)
	errHandler   func(K, error) // WithErrorHandler, or nil
	weight       func(K) int    // WithWeight, or nil
	weightLogged atomic.Bool    // a bad weight was logged
	hist         *[2]histogram  // queue waits by priority, for the quantiles; nil without WithWaitHistogram
	waitHist     *[2]HistogramRecorder
	runHist      *[2]HistogramRecorder // run times by priority; nil without WithRunHistogram
	epoch        time.Time             // time origin of task.at
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
	s.core = core{force: force, owner: s}
	s.weight, _ = o.weight.(func(K) int)
	s.errHandler, _ = o.errHandler.(func(K, error))
	s.checkKeys = keyCheckNeeded(reflect.TypeFor[K]())
	if o.waitHistogram {
		s.hist, s.waitHist = new([2]histogram), new([2]HistogramRecorder)
	}
	if o.runHistogram {
		s.runHist = new([2]HistogramRecorder)
	}
	if o.waitHistogram || o.runHistogram {
		s.epoch = time.Now()
	}
	s.pool.New = func() any { return &session[K]{lanes: lanes{core: &s.core}} }
	s.workers.New = s.newWorker
	return s, nil
}

// Remove drains session key and forgets it. At once, further submissions to
// key fail with a [*SessionError] wrapping [ErrSessionClosing]; every task
// already accepted still runs (High first, as usual); then the session is
// forgotten, every handle on it is closed, and Remove returns nil. The key
// can then be used again as a fresh session.
//
// If ctx ends first, Remove returns ctx's error and the drain still
// completes. Called from the session's own running task (with its ctx, or
// from its fn or a callback run for it with any ctx), Remove cannot wait
// for it: it starts the drain and returns [ErrWouldDeadlock]. Under
// WithMaxConcurrency, a task (or callback) that waits in Remove lends its
// slot while it waits, as Await does. Once Shutdown has given up (a forced
// Shutdown), Remove returns [ErrClosed]: accepted tasks may have been
// dropped. Removing an unknown or idle key returns nil (and drops the idle
// key's record at once). A key a map cannot hold returns a [*KeyError], and
// a ctx whose methods panic the [*PanicError]. When Remove returns nil,
// every task accepted for key has run, its future is resolved, and every
// failure of a posted one reported. Remove is safe for concurrent use; any
// number of callers may remove the same key.
func (s *Scheduler[K]) Remove(ctx context.Context, key K) error {
	return s.endKey(ctx, key, false)
}

// Discard ends session key without running its backlog: at once, new tasks
// are refused (a [*SessionError] wrapping [ErrSessionClosing]), every
// queued task, High and Normal, resolves with [ErrDiscarded] without
// running (a posted task's failure is reported like any other), the
// running task's ctx is canceled with ErrDiscarded as its cause, and the
// session is forgotten once that task returns; every handle on it is
// closed. Discard returns nil then, or ctx's error if ctx ends first (the
// discarding is done all the same), or [ErrWouldDeadlock] when called from
// the session's own task (or a callback run for it), having done the
// discarding. Its other rules are Remove's. It is how a server kicks a
// client, freezes an account or drops a slow consumer.
func (s *Scheduler[K]) Discard(ctx context.Context, key K) error {
	return s.endKey(ctx, key, true)
}

// endKey is Remove (discard unset) and Discard by key.
func (s *Scheduler[K]) endKey(ctx context.Context, key K, discard bool) error {
	if s == nil || s.shards == nil {
		return ErrNotNew
	}
	if ctx == nil {
		return ErrNilContext
	}
	if err := s.validKey(key); err != nil {
		return err
	}
	c, err := s.callerOf(ctx) // the caller's code, before anything changes
	if err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	sess := sh.sessions[key]
	if sess == nil {
		sh.mu.Unlock()
		if s.forced.Load() {
			return ErrClosed
		}
		return nil
	}
	return s.end(ctx, c, sh, sess, discard)
}

// end closes sess (discarding its backlog if asked), unlocks sh, and waits
// for the drain (see Remove and Discard). Called with sh.mu held.
func (s *Scheduler[K]) end(ctx context.Context, c caller[K], sh *shard[K], sess *session[K], discard bool) error {
	d, forgotten := s.close(sh, sess)
	var dropped []*task
	var waiters []*waiter
	var cur *task
	if discard {
		dropped = sh.discard(sess, nil)
		for _, t := range dropped {
			waiters = append(waiters, t.job.publish()) // before the drain can end
		}
		if len(dropped) > 0 && sess.pred != nil {
			sh.setRest(sess, restPinned) // held back, with no work now
		}
		cur = sess.cur
	}
	var reports []*task
	for _, t := range dropped {
		if _, ok := t.job.(*posted[K]); ok {
			reports = append(reports, t)
		}
	}
	if len(reports) > 0 {
		d.pending++ // the reporter settles it
	}
	self := c.runs(sess)
	sh.mu.Unlock()
	for i, t := range dropped {
		t.job.wake(waiters[i])
	}
	if len(reports) > 0 {
		s.startReporter(reports, []*drain{d}, []*shard[K]{sh})
	}
	if forgotten {
		s.recycle(sess)
	}
	if cur != nil {
		cur.discard() // may run the submit ctx's code: last, with everything done
	}
	if self {
		return ErrWouldDeadlock
	}
	return s.wait(ctx, c, d.done, &d.err)
}

// Shutdown stops the scheduler. At once, every Submit fails with
// [ErrClosed]; every accepted task still runs (tasks cannot add new ones);
// Shutdown returns nil when every goroutine the scheduler started has
// returned, and with them every failure of a posted task has been
// reported.
//
// If ctx ends first, Shutdown gives up: no further task starts (one that a
// worker was starting at that instant may still begin, and its ctx is
// canceled like the others), running tasks' contexts are canceled, under
// WithMaxConcurrency a task coming back from an Await no longer waits for a
// slot, every task not yet started resolves with [ErrClosed], and Shutdown
// returns ctx's error without waiting for running tasks. The failures of
// posted tasks it dropped are reported on a goroutine of the scheduler,
// possibly after Shutdown returned; a later Shutdown that returns nil finds
// them reported. Unlike http.Server.Shutdown, the give-up is forceful.
//
// Called from a task of this scheduler (with its ctx, or from its fn or a
// callback with any ctx), Shutdown begins as above but cannot wait for the
// goroutine calling it: it returns [ErrWouldDeadlock]. Shutdown is safe to
// call again and concurrently: a later call waits again, and returns nil
// once the goroutines are gone. A ctx whose methods panic returns the
// [*PanicError] before anything is done.
func (s *Scheduler[K]) Shutdown(ctx context.Context) error {
	if s == nil || s.shards == nil {
		return ErrNotNew
	}
	if ctx == nil {
		return ErrNilContext
	}
	c, err := s.callerOf(ctx)
	if err != nil {
		return err
	}
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		// Barrier: a Submit that saw closed unset has finished enqueueing.
		for i := range s.shards {
			s.shards[i].mu.Lock()
			s.shards[i].mu.Unlock() //nolint:staticcheck // empty critical section is the point
		}
		s.release(0)
	})
	if c.t != nil || c.w != nil {
		return ErrWouldDeadlock // the caller's own goroutine keeps the scheduler busy
	}
	select {
	case <-s.quiet:
		return nil
	default:
	}
	done, perr := ctxDone(ctx)
	if perr != nil {
		return perr
	}
	select {
	case <-s.quiet:
		return nil
	case <-done:
	}
	s.abort()
	return ctxErr(ctx)
}

// abort is Shutdown giving up: cancel running tasks, empty the ready queue
// and every session's queues, resolve what was dropped with ErrClosed, and
// start a reporter for the posted tasks among them.
func (s *Scheduler[K]) abort() {
	s.forced.Store(true)
	s.cancel()
	// Sessions waiting for a slot have no worker: retire them here.
	waiting := s.abortSlots()
	var reports []*task
	for i := range s.shards {
		sh := &s.shards[i]
		var dropped []*task
		var waiters []*waiter
		var r retirement[K]
		sh.mu.Lock()
		for _, sess := range sh.sessions {
			for p := sess; p != nil; p = p.pred { // with the closing sessions a successor replaced
				for t := p.pop(0); t != nil; t = p.pop(0) {
					sh.queued[t.prio]--
					t.job.settle(ErrClosed, outcomeSkipped)
					sh.count(t)
					dropped = append(dropped, t)
					waiters = append(waiters, t.job.publish()) // under the lock: a drain ends after this
				}
				if p.closing != nil {
					p.closing.err = ErrClosed
				}
				if p.pred != nil && p.rest == restNone {
					sh.setRest(p, restPinned) // held back, with no work now
				}
			}
		}
		for _, sess := range waiting {
			if sess.sh == sh {
				s.retire(sh, sess, &r)
			}
		}
		sh.mu.Unlock()
		for i, t := range dropped {
			t.job.wake(waiters[i])
			if _, ok := t.job.(*posted[K]); ok {
				reports = append(reports, t)
			}
		}
		s.finish(&r)
	}
	if len(reports) > 0 {
		s.startReporter(reports, nil, nil) // its token taken before the waiting sessions' go
	}
	s.release(int64(len(waiting)))
}

// caller is who makes a call that may wait: the running task whose ctx, or
// a ctx derived from it, was passed, and the worker whose goroutine the
// call runs on, while it runs user code (see callsite.go).
type caller[K comparable] struct {
	t *task
	w *worker[K]
}

// callerOf finds who calls with ctx (ctx.Value is the caller's code: a
// panic there is returned), and the calling goroutine's worker.
func (s *Scheduler[K]) callerOf(ctx context.Context) (c caller[K], err error) {
	t, err := runningTask(ctx)
	if err != nil {
		return c, err
	}
	if t != nil && t.lanes.core == &s.core {
		c.t = t
	}
	c.w = s.currentWorker()
	return c, nil
}

// currentWorker returns the worker of s whose goroutine calls, if any.
func (s *Scheduler[K]) currentWorker() *worker[K] {
	if w, ok := currentIdent().(*worker[K]); ok && w.s == s && w.site != siteNone {
		return w
	}
	return nil
}

// runs reports whether waiting for sess to be forgotten would wait for the
// caller: sess, or a predecessor it is held back behind, is the session of
// the caller's task or worker. Called with sess's shard lock held.
func (c caller[K]) runs(sess *session[K]) bool {
	for p := sess; p != nil; p = p.pred {
		if (c.t != nil && c.t.lanes == &p.lanes) || (c.w != nil && c.w.sess == p) {
			return true
		}
	}
	return false
}

// slot is the lent-slot state of the caller's slot, if it holds one: a
// task's (shared by the waits of every goroutine using its ctx), or the
// worker's while it runs a callback.
func (c caller[K]) slot() *lentSlot {
	switch {
	case c.t != nil && c.t.lanes.core.owner.limited():
		return c.t.slotState()
	case c.t != nil:
		return nil
	case c.w != nil && c.w.slot && c.w.site == siteFn:
		return c.w.t.slotState()
	case c.w != nil && c.w.slot:
		return &c.w.lent
	}
	return nil
}

// slotState returns t's lent-slot state, making it if need be.
func (t *task) slotState() *lentSlot {
	a := t.extra()
	if ls := a.lent.Load(); ls != nil {
		return ls
	}
	ls := new(lentSlot)
	if !a.lent.CompareAndSwap(nil, ls) {
		ls = a.lent.Load()
	}
	return ls
}

// fromCallback tells Await, called from no running task of its ctx,
// whether its wait for a task queued on l could never end because the
// caller is a callback a worker runs for that session, or else the
// callback's slot to lend (see owner).
func (s *Scheduler[K]) fromCallback(l *lanes) (deadlock bool, ls *lentSlot) {
	if s.callbacks.Load() == 0 {
		return false, nil
	}
	w := s.currentWorker()
	if w == nil {
		return false, nil
	}
	if w.sess != nil && heldBehind(l, &w.sess.lanes) {
		return true, nil
	}
	return false, caller[K]{w: w}.slot()
}

// limited reports whether s has a concurrency limit: only then is there a
// slot to lend.
func (s *Scheduler[K]) limited() bool { return s.opts.maxConcurrency > 0 }

// wait blocks until done is closed (then returns *result) or ctx ends
// (then returns ctx's error), lending the caller's slot meanwhile.
func (s *Scheduler[K]) wait(ctx context.Context, c caller[K], done <-chan struct{}, result *error) error {
	if ls := c.slot(); ls != nil && s.lend(ls) {
		defer s.reclaim(ls)
	}
	ctxDone, perr := ctxDone(ctx)
	if perr != nil {
		return perr
	}
	select {
	case <-done:
		return *result
	case <-ctxDone:
		select {
		case <-done:
			return *result
		default:
			return ctxErr(ctx)
		}
	}
}

// Queued returns how many tasks wait in key's High and Normal lanes, the
// running one not counted; an unknown or idle key reports 0, 0.
func (s *Scheduler[K]) Queued(key K) (high, normal int) {
	if s == nil || s.shards == nil || s.validKey(key) != nil {
		return 0, 0
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sess := sh.sessions[key]; sess != nil {
		return sess.high.n, sess.normal.n
	}
	return 0, 0
}

// takeToken takes a live token (see live).
func (s *Scheduler[K]) takeToken() {
	s.live.Add(1)
	if checkTokens {
		s.slack.Add(1)
	}
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

// exit is a worker's last act: it gives back its live token.
func (s *Scheduler[K]) exit() {
	if checkTokens {
		s.slack.Add(1)
	}
	s.release(1)
}

// recycle puts a forgotten session back in the pool, unless a handle held
// it: a handle must go on finding it gone.
func (s *Scheduler[K]) recycle(sess *session[K]) {
	if sess.handled {
		return
	}
	// Only what forget leaves set (pred and succ are cleared under the
	// lock when a successor is released); the lanes stay, since an Await
	// may still read them.
	sess.closing, sess.cur = nil, nil
	s.pool.Put(sess)
}
