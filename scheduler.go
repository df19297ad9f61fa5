package seqsched

import (
	"cmp"
	"context"
	"hash/maphash"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqsched/seqsched/internal/histogram"
)

// Scheduler runs tasks keyed by session (K, for example a connection ID or
// an account number), under these rules:
//
//   - Tasks of one session never overlap and start in submission order
//     within a priority; each task happens-before the next of its session.
//   - When a session picks its next task it takes the oldest High task,
//     else the oldest Normal one. A running task is never interrupted. High
//     tasks can starve Normal ones of their own session if they keep coming
//     (see [WithHighBurst]).
//   - A session gets a goroutine only when it has work, at most one at a
//     time, and gives it up when its queues are empty; a task that blocks
//     delays no other session. An idle session keeps no goroutine and no
//     tasks, and memory does not grow with the number of keys ever seen.
//     New starts no goroutine; there are no timers and no polling.
//   - After every [WithYieldAfter] tasks (a turn; see also [WithWeight] and
//     [WithYieldInterval]) a session checks for waiting sessions. Under
//     [WithMaxConcurrency] it goes to the back of the FIFO ready queue and
//     hands its slot to the head; without a limit it calls runtime.Gosched.
//     A lone session drains without yielding.
//
// Create one with [New]; the zero value is not usable. Most callers want
// [Scheduler.Open] and a handle's Post (fire and forget, failures to
// [WithErrorHandler] or the log), and [Submit] when a result is awaited.
// All methods are safe for concurrent use, including from tasks and
// callbacks (see [WithErrorHandler] for what a callback may call). Stop it
// with [Scheduler.Shutdown], which drains and waits for the goroutines it
// started, or give up at once with [Scheduler.Close].
type Scheduler[K comparable] struct {
	opts    options
	seed    maphash.Seed
	shards  []shard[K]
	mask    uint64
	idleCap int         // idle records kept per shard
	rq      runQueue[K] // startQueues, or slots under WithMaxConcurrency
	core    core
	records sync.Pool // of *session[K], evicted idle records for reuse (see recycle)

	// The live tokens: one per goroutine the scheduler runs, and one per
	// session waiting in the ready queue. Shutdown is done when none is
	// left after its barrier. They are counted in stripes, one per shard
	// (shard.live), so that cores at work on different shards do not all
	// write one word: a token is taken and given back through any stripe
	// (a goroutine that took it through one shard may give it back through
	// another), and only the stripes' sum means anything (tokens). A token
	// is taken under the lock that publishes what holds it, through that
	// lock's shard, so Shutdown's barrier (closed set, then every shard
	// lock taken once) sees every token a Submit that saw closed unset
	// takes. Then seal adds sealedBit to every stripe, which says that
	// what comes through it from now on is counted in afterSeal too, and
	// moves the stripes' sum into afterSeal: the scheduler is quiet when
	// one atomic operation leaves afterSeal at exactly zero. A goroutine
	// gives its token back as its last act.
	afterSeal  atomic.Int64
	quiet      chan struct{}
	quietOnce  sync.Once
	sealOnce   sync.Once
	giveUpOnce sync.Once

	yields    atomic.Uint64
	slowTasks atomic.Uint64

	checkKeys        bool                            // K can hold a key a map cannot (see keyCheckNeeded)
	plainKeys        bool                            // set by New when neither checkKeys nor WithHaltOnError is (see needsCheck)
	errHandler       func(context.Context, K, error) // WithErrorHandler, or nil
	weight           func(K) int                     // WithWeight, or nil
	interceptors     []interceptor[K]                // WithInterceptor's, outermost first; nil without
	weightLogged     atomic.Bool                     // a weight out of range was logged
	weightFailLogged atomic.Bool                     // a weight function's panic or Goexit was logged
	rate             func(K) (float64, int)          // WithRate, or nil
	rateLogged       atomic.Bool                     // a rate out of range, or the function's panic or Goexit, was logged
	waitHist         *[2]*histogram.Fine             // queue waits by priority, for Wait and WaitHistogram; nil without WithWaitHistogram
	runHist          *[2]histogram.Recorder          // run times by priority; nil without WithRunHistogram
	timesFn          bool                            // afterFn has work: slot loans to end, or run times to record (see timeFn)
}

// core is what a task and the waits need of their scheduler, without the
// key type.
type core struct {
	givenUp context.Context // canceled when the scheduler gives up (Close, or Shutdown's ctx ended)
	cancel  context.CancelFunc
	closed  atomic.Bool // Shutdown or Close began: Submit fails
	gaveUp  atomic.Bool // the scheduler gave up: no task starts
	loans   loans       // the run queue's loans of slots
	// stamped says each task records when it was queued (task.at, in ns
	// since epoch): with WithWaitHistogram, or for Enqueued with an
	// interceptor. Without either the hot path reads no clock.
	stamped bool
	epoch   time.Time
	parkers parkers // the Awaits' (future.go)
}

// lend lends the slot of the session whose task or callback waits; it
// returns a func to call when the wait ends, or nil.
func (c *core) lend(caller *base) (reclaim func()) {
	epoch, ok := c.loans.lendSlot(caller)
	if !ok {
		return nil
	}
	return func() { c.loans.reclaimSlot(caller, epoch) }
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
		idleCap: max(cmp.Or(o.idleRecords, idleRecords)/n, 1),
		quiet:   make(chan struct{}),
	}
	s.core.givenUp, s.core.cancel = context.WithCancel(context.Background())
	s.rq = startQueues[K]{s}
	if o.maxConcurrency > 0 {
		q := &slots[K]{s: s, max: o.maxConcurrency}
		q.ready.which = listReady
		s.rq = q
	}
	s.core.loans = s.rq
	for i := range s.shards {
		sh := &s.shards[i]
		sh.index = uint32(i)
		sh.pending.which = listReady
		sh.starter = func() { startQueues[K]{s}.startFrom(sh) }
	}
	s.weight, _ = o.weight.(func(K) int)
	s.errHandler, _ = o.errHandler.(func(context.Context, K, error))
	s.rate, _ = o.rate.(func(K) (float64, int))
	for _, f := range o.interceptors {
		s.interceptors = append(s.interceptors, f.(func(context.Context, K, func(context.Context) error) error))
	}
	s.checkKeys = keyCheckNeeded(reflect.TypeFor[K]())
	s.plainKeys = !s.checkKeys && !o.haltOnError
	if o.waitHistogram {
		s.waitHist = &[2]*histogram.Fine{histogram.NewFine(), histogram.NewFine()}
	}
	if o.runHistogram {
		s.runHist = new([2]histogram.Recorder)
	}
	s.timesFn = o.maxConcurrency > 0 || o.runHistogram || o.slowTask > 0
	s.core.stamped = o.waitHistogram || len(o.interceptors) > 0
	if s.core.stamped || o.runHistogram {
		s.core.epoch = time.Now()
	}
	return s, nil
}

// usable reports whether s was made by New.
func (s *Scheduler[K]) usable() bool { return s != nil && s.shards != nil }

// Submit queues fn as a task on session key and returns its future.
//
// The error is non-nil only when the task was not accepted: [ErrClosed]
// once Shutdown has begun, a [*SessionError] wrapping [ErrSessionClosing]
// while key is being removed or discarded, [ErrQueueFull] past
// WithMaxQueue, a [*KeyError] (wrapping [ErrInvalidKey]) for a key a map
// cannot hold (a NaN, or an interface holding a slice, map or func),
// [ErrNilFunc], [ErrNilContext], [ErrNotNew], or an [*OptionError] for a
// bad [TaskOption]. Submit never blocks, and calls none of ctx's methods,
// unless the task is submitted with [WaitForRoom] and its lane is full.
//
// fn runs on a goroutine of the scheduler with a ctx that carries ctx's
// values and deadline. That ctx is done when ctx is, when Shutdown gives
// up, when [Scheduler.Discard] ends the session (see [Cause]), or once the
// task is over (its future resolved), whichever comes first; it keeps the
// context.Context contract, so it may be kept, watched and derived from on
// any goroutine. If ctx is done before the task starts, fn never runs and
// the future resolves with ctx.Err(). A panic in fn is recovered and
// resolves the future with a [*PanicError], and runtime.Goexit with
// [ErrGoexit] (a panic raised while a Goexit unwinds is a *PanicError; a
// Goexit called while a panic unwinds is ErrGoexit); the session goes on.
//
// Memory model: everything fn does happens before its future's Await (or
// Done) reports it resolved, before a Remove or Shutdown that returns nil
// returns, and before the next task of its key starts.
//
// A task may queue follow-up work with its own ctx: when ctx is a task's
// ctx itself, the new task inherits the ctx that task was submitted with
// (values, deadline, cancellation), not the end of that task. A ctx derived
// from a task's ctx (WithValue, WithTimeout, ...) ends with that task, like
// any child context; pass context.WithoutCancel(ctx) for work that must
// outlive the task whatever ctx it was given.
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

// Post queues fn on session key with no future: fire and forget. It keeps
// every other guarantee of [Scheduler.Go] (order, the High lane, fn's ctx,
// fairness, panics recovered, Remove and Shutdown drain it) and returns the
// same errors when the task is not accepted. Its failures go to
// [WithErrorHandler], or without one to the log (see [WithLogger]): fn's
// error, a [*PanicError], [ErrGoexit], or, for a task that never ran, its
// submit ctx's error, [ErrDiscarded] or [ErrClosed].
//
// The ctx decides how long the task may wait: pass the ctx of what the work
// is for. With a connection's ctx, messages posted to a client are dropped
// unrun once the connection is gone (their failure, the ctx's error, is
// logged at Debug), which is what a server wants on disconnect:
//
//	h.Post(conn.Context(), func(ctx context.Context) error { return conn.Write(ctx, msg) })
//
// With context.Background(), the task runs whatever happens to its
// submitter (until Discard or a Shutdown that gave up).
func (s *Scheduler[K]) Post(ctx context.Context, key K, fn func(context.Context) error, opts ...TaskOption) error {
	return post(ctx, s, nil, key, fn, opts)
}

// submit is Submit and Go, by key (h nil) or through a handle: exactly one
// of fn and fn0 is set (Go's fn is kept as it is, so that it needs no
// wrapper closure). It checks what it can before it allocates.
func submit[K comparable, T any](ctx context.Context, s *Scheduler[K], h *Session[K], key K,
	fn func(context.Context) (T, error), fn0 func(context.Context) error, opts []TaskOption) (*Future[T], error) {
	var sp spec
	var err error
	if s.needsCheck(ctx, h, opts) {
		if sp, err = s.admissible(ctx, h, key, opts); err != nil {
			return nil, err
		}
	}
	f := &Future[T]{fn: fn, fn0: fn0}
	f.t.parent, f.t.prio, f.t.flags, f.t.job = submitCtx(ctx), sp.prio, sp.flags, f
	if sp.tag != "" || sp.flags&flagWait != 0 {
		err = s.acceptControlled(ctx, h, key, &f.t, sp.tag)
	} else {
		err = s.accept(h, key, &f.t)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// post is Scheduler.Post (h nil) and Session.Post.
func post[K comparable](ctx context.Context, s *Scheduler[K], h *Session[K], key K,
	fn func(context.Context) error, opts []TaskOption) error {
	if fn == nil {
		return ErrNilFunc
	}
	var sp spec
	if s.needsCheck(ctx, h, opts) {
		var err error
		if sp, err = s.admissible(ctx, h, key, opts); err != nil {
			return err
		}
	}
	p := &posted{fn: fn}
	p.t.parent, p.t.prio, p.t.flags, p.t.job = submitCtx(ctx), sp.prio, sp.flags, p
	if sp.tag != "" || sp.flags&flagWait != 0 {
		return s.acceptControlled(ctx, h, key, &p.t, sp.tag)
	}
	return s.accept(h, key, &p.t)
}

// needsCheck reports whether a task needs admissible's call, which most
// do not: a task with no options and a ctx, through a handle or by a key
// that needs no check (plainKeys), has nothing else to check, unless
// WithHaltOnError flags it. It is the round trip's and the stream's common
// case, kept to a few loads.
func (s *Scheduler[K]) needsCheck(ctx context.Context, h *Session[K], opts []TaskOption) bool {
	if ctx == nil || len(opts) > 0 {
		return true
	}
	if h != nil {
		return s.opts.haltOnError // its key was checked at Open
	}
	return s == nil || !s.plainKeys // plainKeys is set by New only
}

// admissible checks what Submit, Go and Post can check before they
// allocate: the scheduler, ctx, the options, and a key given by value (h
// nil; a handle's key was checked at Open).
func (s *Scheduler[K]) admissible(ctx context.Context, h *Session[K], key K, opts []TaskOption) (spec, error) {
	if h == nil && !s.usable() {
		return spec{}, ErrNotNew
	}
	if ctx == nil {
		return spec{}, ErrNilContext
	}
	var sp spec
	var err error
	if len(opts) > 0 { // most tasks have no options
		sp, err = taskSpec(opts)
	}
	if s.opts.haltOnError {
		sp.flags |= flagHalt
	}
	if err == nil && h == nil {
		err = s.validKey(key)
	}
	return sp, err
}

// accept queues t on h's session, or on key's when h is nil (making the
// session if key has none), and starts the session's goroutine if it needs
// one. A task tagged for Replace, or one that may wait for room, goes to
// acceptControlled instead.
//
// accept is on the stack of every wake-up: a task that submits to an idle
// key runs accept, admit, the run queue's schedule and fire (and take, in
// the woken session's advance) on its own goroutine,
// whose stack starts small and is copied to grow (bench's wake-up stack
// target). So what only Replace and WaitForRoom need, and their wide
// calls, stay out of accept's frame.
func (s *Scheduler[K]) accept(h *Session[K], key K, t *task) error {
	sh, sess, err := s.lockSession(h, key, t)
	if err != nil {
		return err
	}
	q := &sess.normal
	if t.prio == High {
		q = &sess.high
	}
	if max := s.opts.maxQueue; max > 0 && q.n >= max {
		sh.mu.Unlock()
		return ErrQueueFull
	}
	start := s.admit(sh, sess, t)
	if start && s.opts.maxConcurrency > 0 {
		start = s.rq.schedule(sh, sess)
	} else if start {
		start = startQueues[K]{s}.schedule(sh, sess) // s.rq.schedule, called directly (see runQueue)
	}
	if start && s.stages(sess) {
		s.stage(sh, sess, t)
	}
	sh.mu.Unlock()
	if start {
		go sess.start()
	}
	return nil
}

// stages reports whether sess, which Submit just spawned from idle, may
// have its task staged for its goroutine (see stage): nothing but its
// goroutine's take may look at the task before it starts, so no queue
// bound, slot limit, rate or per-key control.
func (s *Scheduler[K]) stages(sess *session[K]) bool {
	return s.opts.maxQueue == 0 && s.opts.maxConcurrency == 0 && s.rate == nil && sess.ctl == nil &&
		sess.w.pace == nil && !sess.pause
}

// acceptControlled is accept for a task tagged for Replace or one that may
// wait for room: it may take a queued task's place instead (see
// replace.go), or wait for room (see room.go).
func (s *Scheduler[K]) acceptControlled(ctx context.Context, h *Session[K], key K, t *task, tag string) error {
	var caller *base
	asked := false // caller was read from ctx: only when the lane is full
again:
	sh, sess, err := s.lockSession(h, key, t)
	if err != nil {
		return err
	}
	if tag != "" {
		if old, ok := s.replace(sh, sess, t, tag); ok {
			sh.mu.Unlock()
			old.wake()
			return nil
		}
	}
	q := &sess.normal
	if t.prio == High {
		q = &sess.high
	}
	if max := s.opts.maxQueue; max > 0 && q.n >= max {
		if t.flags&flagWait == 0 {
			sh.mu.Unlock()
			return ErrQueueFull
		}
		if !asked {
			// ctx is read with no lock held (it is the caller's value),
			// and only when the caller may have to wait: look again.
			sh.mu.Unlock()
			caller, asked = callerOf(ctx), true
			goto again
		}
		return s.waitForRoom(ctx, sh, sess, t, tag, caller) // unlocks sh
	}
	if tag != "" {
		s.tag(sess, t, tag) // in the lock section that admits t: no worker sees it untagged
	}
	start := s.admit(sh, sess, t) && s.rq.schedule(sh, sess)
	sh.mu.Unlock()
	if start {
		go sess.start()
	}
	return nil
}

// lockSession stamps t's queue time (with a wait histogram), locks the
// shard of h's session, or of key's when h is nil, and returns the session
// t goes to (made if key has none) with the shard locked, or, unlocked,
// the error that refuses t.
func (s *Scheduler[K]) lockSession(h *Session[K], key K, t *task) (*shard[K], *session[K], error) {
	if s.core.stamped {
		t.at = time.Since(s.core.epoch).Nanoseconds()
	}
	var sh *shard[K]
	var sess *session[K]
	if h != nil {
		sh, sess = h.sess.sh, h.sess
		sh.mu.Lock()
		if h.closed || sess.drain != nil || sess.state == stateGone {
			sh.mu.Unlock()
			return nil, nil, &SessionError{Key: key, Err: ErrSessionClosing}
		}
	} else {
		sh = s.shard(key)
		sh.mu.Lock()
		if sess = sh.sessions[key]; sess != nil && sess.drain != nil {
			sh.mu.Unlock()
			return nil, nil, &SessionError{Key: key, Err: ErrSessionClosing}
		}
	}
	if s.core.closed.Load() {
		sh.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if sess == nil {
		sess = s.makeSession(sh, key)
	}
	return sh, sess, nil
}

// Queued returns how many tasks wait in key's High and Normal lanes, the
// running one not counted, including those of a closing session that key's
// new session waits behind; an unknown or idle key reports 0, 0.
func (s *Scheduler[K]) Queued(key K) (high, normal int) {
	if !s.usable() || s.validKey(key) != nil {
		return 0, 0
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for sess := sh.sessions[key]; sess != nil; sess = sess.pred {
		s.unstage(sh, sess)
		high += sess.high.n
		normal += sess.normal.n + int(sess.runLeft.Load())
	}
	return high, normal
}

// sealedBit is added to every stripe of the live tokens (shard.live) once
// Shutdown's barrier has passed. A stripe's value is the tokens taken
// less those given back through it, which may be below zero, but never
// by half of sealedBit: a value above half of it is a sealed stripe's.
// afterSeal holds sealedBit too while seal counts the stripes, so that it
// cannot reach zero before their sum is in it.
const sealedBit = 1 << 40

// tokens returns the live tokens held now: the stripes' sum, less their
// sealedBits.
func (s *Scheduler[K]) tokens() int64 {
	var n int64
	for i := range s.shards {
		v := s.shards[i].live.Load()
		if v > sealedBit/2 {
			v -= sealedBit
		}
		n += v
	}
	return n
}

// addTokens takes n live tokens through sh's stripe, or gives -n back;
// after Shutdown's barrier it counts them in afterSeal too, and the
// scheduler is quiet when they were the last.
func (s *Scheduler[K]) addTokens(sh *shard[K], n int64) {
	if sh.live.Add(n) > sealedBit/2 { // else seal counts it
		s.addAfterSeal(n)
	}
}

// addAfterSeal is addTokens through a sealed stripe, out of line: the
// wake-up's stack (bench's wake-up stack target) has no room for it.
func (s *Scheduler[K]) addAfterSeal(n int64) {
	if s.afterSeal.Add(n) == 0 {
		s.quietOnce.Do(func() { close(s.quiet) })
	}
}

// takeTokenUnlessQuiet takes a live token through sh's stripe, and
// reports false when the scheduler is quiet already: nothing waits for
// what the caller would start. A token refused is never counted, not even
// for an instant, so that the scheduler, once quiet, stays without live
// tokens: before the stripe's seal, it is counted there (and the seal
// counts it); after, it is taken from afterSeal only while that is above
// zero, then added to the stripe without being counted in afterSeal twice.
func (s *Scheduler[K]) takeTokenUnlessQuiet(sh *shard[K]) bool {
	for {
		v := sh.live.Load()
		if v < sealedBit/2 {
			if sh.live.CompareAndSwap(v, v+1) {
				return true
			}
			continue // another token moved, or the seal came: look again
		}
		n := s.afterSeal.Load()
		if n == 0 {
			return false
		}
		if s.afterSeal.CompareAndSwap(n, n+1) {
			sh.live.Add(1)
			return true
		}
	}
}

// seal marks Shutdown's barrier passed: every stripe sealed, their sum
// moved into afterSeal, and the scheduler quiet if no token is held.
// What a stripe counted before its seal is in the value its seal's Add
// returns; what comes through it after is added to afterSeal by addTokens.
func (s *Scheduler[K]) seal() {
	s.sealOnce.Do(func() {
		s.afterSeal.Add(sealedBit) // off zero while the stripes are counted
		var n int64
		for i := range s.shards {
			n += s.shards[i].live.Add(sealedBit) - sealedBit
		}
		if s.afterSeal.Add(n-sealedBit) == 0 {
			s.quietOnce.Do(func() { close(s.quiet) })
		}
	})
}
