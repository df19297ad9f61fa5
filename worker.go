package seqsched

import (
	"context"
	"runtime/debug"
	"time"
)

// A worker is the state of the goroutine that runs a session's turn. It
// lives in the session record (a session has at most one goroutine at a
// time), so starting one allocates nothing. A goroutine runs one session
// at a time; under WithMaxConcurrency it moves on to the next session of
// the ready queue when its session retires or yields, taking its slot with
// it.
//
// One task's path, in order: admit (session.go) queues it and schedules
// an idle session; the goroutine (work) takes it (nextTask), runs or skips it
// (runTask), reports a posted task's failure (report), then advance
// resolves it under the shard lock and takes the next task, yields the
// turn, or retires the session; in a run (run.go) it resolves it and
// claims the next with no lock held.
//
// The guard: every goroutine the scheduler starts runs work, whose guard
// catches whatever unwinds through user code it calls (fn, the error
// handler, the logger, the weight function, and the methods of values they
// return). The worker always knows what is at hand (user says which user
// code runs), so the guard fails that and the goroutine carries on from
// there: after a panic on the same goroutine, after runtime.Goexit (and a
// panic raised while one unwinds) on a new one. Nothing is lost: no task,
// slot, live token or goroutine.
type worker[K comparable] struct {
	handed event // handed a slot from the ready queue: the move to make before all else (see enter)
	t      *task // the task in hand
	stage  stage
	user   user // the user code running now, for the guard

	newTurn   bool // begin a turn before the next task
	n, limit  int  // tasks run in this turn, and how many it may run
	turnStart time.Time
	began     time.Time // when t's fn began; only with WithSlowTask or a histogram

	pace     *tokenBucket // WithRate's bucket, if the key is paced (rate.go)
	rateRead bool         // the WithRate function was asked
	timer    *paceTimer   // the timer a paced session waits on; guarded by the shard lock

	nexts    []func(context.Context) error // the interceptors' nexts (intercept.go), made once
	replaced []wakeUp                      // tasks makeRoom replaced under the lock, to finish without it
	first    bool                          // stage handed it a task: claim it before advancing

	// In a run (see run.go): the next task to claim, whether the worker is
	// in one, and the outcomes of the run's tasks it resolved, for the
	// shard's counts in its next lock section.
	next      *task
	inRun     bool
	runCounts [nOutcomes]uint64

	logs      []record     // records to write, each taken off before it is written
	reporting []*task      // failures of dropped posted tasks, to report (see Scheduler.drop)
	cb        *callbackCtx // the running callback's ctx
}

// stage is where the task in hand is.
type stage uint8

const (
	stageRun    stage = iota // to run, or skip
	stageReport              // failed or was skipped: report a posted task's failure
	stageDone                // reported, or succeeded: advance resolves it
)

// user is the user code a worker is running.
type user uint8

const (
	userNone user = iota
	userFn
	userHandler
	userLogger
	userWeight
	userSubmitCtx // the submit ctx's Err, read before the task starts
	userRate      // the WithRate function
)

// begin starts a turn: at once when it needs neither the weight function
// (user code, which runs only in a step of the worker: beginTurn) nor the
// clock, else in the worker's next step.
func (s *Scheduler[K]) begin(w *worker[K]) {
	if s.weight == nil && s.opts.yieldInterval == 0 {
		w.newTurn, w.n, w.limit = false, 0, s.opts.yieldAfter
		return
	}
	w.newTurn = true
}

// work is the one guard of every goroutine the scheduler starts, in
// singleflight's doCall shape: two deferred frames (work's own and
// steps') and the flags of a guardState tell the four endings of user
// code apart, and each is turned into a failed task or a log record by
// unwound, with no lock held:
//
//   - a normal return: steps returns with g.sess nil, and work gives back
//     the goroutine's live token as its last act;
//   - a panic: steps' frame recovers it, and the goroutine goes on with
//     the session;
//   - runtime.Goexit, or a Goexit called from a panic's deferred calls
//     (recover then returns nil): only work's frame runs, and another
//     goroutine carries on with the session and this one's live token;
//   - a panic raised while a Goexit unwinds: steps' frame recovers it,
//     the task fails with that panic, and Go resumes the Goexit: work's
//     frame then finds it handled, and starts the goroutine that carries
//     on.
//
// The guard adds two frames, not three, to the stack that a wake-up runs
// on (bench's wake-up stack target): a task that posts to an idle key
// runs the submit path on this goroutine's first, small stack.
func (s *Scheduler[K]) work(sess *session[K]) {
	g := guardState[K]{sess: sess, stripe: sess.sh.index}
	defer func() {
		if g.normal {
			return
		}
		if !g.handled {
			s.unwound(g.sess, nil, nil)
		}
		go g.sess.start()
	}()
	for g.sess != nil {
		s.steps(&g)
	}
	g.normal = true
	// Any stripe serves (see Scheduler.afterSeal): the first session's
	// shard's (whose stripe took the token, unless a slot's hand-off
	// started the goroutine) spreads the goroutines' ends over the shards
	// as their keys are, and costs no random number. Its index, not the
	// shard, is kept: it fits in guardState's padding, and this frame is
	// on a wake-up's stack, which has no room to spare.
	s.addTokens(&s.shards[g.stripe], -1)
}

// guardState is what work and steps know of the user code a goroutine
// runs: the session at hand, and how the last of it ended.
type guardState[K comparable] struct {
	sess    *session[K]
	stripe  uint32 // the shard whose stripe takes the goroutine's live token back (see work)
	normal  bool   // work returned: no Goexit
	handled bool   // steps recovered a panic, which unwound has turned into an outcome
}

// steps runs g.sess's steps until the goroutine has nothing left (g.sess
// is nil) or user code panicked (g.sess is the session to go on with,
// and the panic has been handled). See work.
func (s *Scheduler[K]) steps(g *guardState[K]) {
	g.handled = false
	defer func() {
		if r := recover(); r != nil {
			g.handled = true
			s.unwound(g.sess, r, debug.Stack())
		}
	}()
	for sess := g.sess; sess != nil; {
		// g.sess is written only when the session changes: while the GC
		// marks, every pointer store pays a write barrier, and a
		// goroutine with a backlog steps the same session task after task.
		next := s.step(sess)
		if next != sess {
			g.sess = next
		}
		sess = next
	}
}

// unwound turns what unwound through user code into the outcome of what
// was at hand: the task fails with a *PanicError or ErrGoexit, a failed
// report or weight is logged, a failed log record is dropped. r is the
// panic value, nil for runtime.Goexit.
func (s *Scheduler[K]) unwound(sess *session[K], r any, stack []byte) {
	w := &sess.w
	u := w.user
	if u == userHandler || u == userLogger || u == userWeight || u == userRate {
		s.endCallback(sess)
	}
	w.user = userNone
	switch u {
	case userFn:
		var err error = ErrGoexit
		if r != nil {
			err = &PanicError{Value: r, Stack: stack}
		}
		w.t.job.fail(err, outcomePanicked)
		s.logFailure(sess, w.t, r, stack)
		s.afterFn(sess, w.t)
	case userHandler:
		s.logCallback(sess, "seqsched: WithErrorHandler panicked", "seqsched: WithErrorHandler called runtime.Goexit", r, stack)
	case userWeight:
		w.limit = s.opts.yieldAfter
		if s.weightFailLogged.CompareAndSwap(false, true) { // once per scheduler
			s.logCallback(sess, "seqsched: WithWeight panicked; using weight 1",
				"seqsched: WithWeight called runtime.Goexit; using weight 1", r, stack)
		}
	case userRate:
		if s.rateLogged.CompareAndSwap(false, true) { // once per scheduler
			s.logCallback(sess, "seqsched: WithRate panicked; key not paced",
				"seqsched: WithRate called runtime.Goexit; key not paced", r, stack)
		}
	case userSubmitCtx:
		// A ctx is trusted to keep its contract; one that does not fails
		// its own task, which never ran, and nothing else.
		var err error = ErrGoexit
		if r != nil {
			err = &PanicError{Value: r, Stack: stack}
		}
		w.t.job.fail(err, outcomeSkipped)
		s.logCallback(sess, "seqsched: a submit ctx's Err panicked; the task did not run",
			"seqsched: a submit ctx's Err called runtime.Goexit; the task did not run", r, stack)
	case userLogger:
		// The record is dropped: there is nowhere else to write it.
	default:
		// No user code was running: a bug in the scheduler itself. Let it
		// crash the process rather than carry on from a state nobody knows.
		if r != nil {
			panic(r)
		}
	}
}

// step does the next thing for sess and returns the session the goroutine
// goes on with (sess, another one, or nil to exit).
func (s *Scheduler[K]) step(sess *session[K]) *session[K] {
	w := &sess.w
	switch {
	case w.handed != evNone:
		s.enter(sess)
	case len(w.replaced) > 0:
		d := w.replaced[0]
		w.replaced[0] = wakeUp{}
		w.replaced = w.replaced[1:]
		d.wake()
	case len(w.logs) > 0:
		s.writeLog(sess)
	case s.rate != nil && !w.rateRead:
		s.readRate(sess)
	case w.newTurn:
		s.beginTurn(sess)
	case w.t != nil && w.stage == stageRun:
		s.runTask(sess)
		if w.stage == stageDone && s.onlyTask(w) {
			return s.advance(sess) // the next step's, without its dispatch
		}
	case w.t != nil && w.stage == stageReport:
		w.stage = stageDone
		s.report(sess, w.t)
	case len(w.reporting) > 0:
		t := w.reporting[0]
		w.reporting[0] = nil
		w.reporting = w.reporting[1:]
		s.report(sess, t)
	default:
		if s.claim(sess) {
			if !s.onlyTask(w) {
				return sess
			}
		} else if next := s.advance(sess); next != sess || w.t == nil || !s.onlyTask(w) {
			return next
		}
		// claim or advance took a task to run (stageRun), and nothing
		// comes before it: run it, and advance again, in this step, as the
		// next steps would. Of what onlyTask looks at, running a task can
		// add only a record to write (WithSlowTask's): the rest is set by
		// this goroutine's advance, or on a session without a goroutine.
		s.runTask(sess)
		if w.stage == stageDone && len(w.logs) == 0 {
			return s.advance(sess)
		}
	}
	return sess
}

// onlyTask reports whether w has nothing to do before the task in hand's own
// next step (see step): no slot to enter, no replaced task to finish, no
// record to write, the rate read, no turn to begin, no failure of a
// dropped task to report.
func (s *Scheduler[K]) onlyTask(w *worker[K]) bool {
	return w.handed == evNone && len(w.replaced)+len(w.logs)+len(w.reporting) == 0 && !w.newTurn &&
		(s.rate == nil || w.rateRead)
}

// enter moves a session handed a slot from the ready queue to running,
// with a new turn: on a goroutine started for it (evSpawn), which takes
// its live token, or on one that goes on with it (evHandOver), whose own
// token serves it.
func (s *Scheduler[K]) enter(sess *session[K]) {
	sh := sess.sh
	on := sess.w.handed
	sess.w.handed = evNone
	sh.mu.Lock()
	s.fire(sh, sess, on)
	s.unlock(sh)
}

// beginTurn starts a turn: yieldAfter tasks, times the WithWeight
// function's weight.
func (s *Scheduler[K]) beginTurn(sess *session[K]) {
	w := &sess.w
	w.newTurn, w.n, w.limit = false, 0, s.opts.yieldAfter
	if s.opts.yieldInterval > 0 {
		w.turnStart = time.Now()
	}
	if s.weight == nil {
		return
	}
	w.user = userWeight
	weight := s.weight(sess.key)
	w.user = userNone
	if weight < MinWeight || weight > MaxWeight {
		s.logWeight(sess, weight)
		return
	}
	w.limit *= weight
}

// turnOver reports whether the turn has run its count of tasks or, with
// WithYieldInterval, its time (after at least one task).
func (w *worker[K]) turnOver(interval time.Duration) bool {
	return w.n >= w.limit || interval > 0 && w.timeUp(interval)
}

// timeUp reports whether the turn, with at least one task run, has lasted
// interval (WithYieldInterval): apart from turnOver, and never inlined in
// it, so that turnOver is inlined and reads no clock without the option.
//
//go:noinline
func (w *worker[K]) timeUp(interval time.Duration) bool {
	return w.n > 0 && time.Since(w.turnStart) >= interval
}

// runTask runs the task in hand, or skips it: once Shutdown gave up, once
// Discard ended its session, or when its submit ctx ended.
//
// runTask is on the stack of every wake-up (see Scheduler.accept): what
// only a skip or a timing option needs is in skipped and stamp, so that
// its calls stay out of this frame.
func (s *Scheduler[K]) runTask(sess *session[K]) {
	w, t := &sess.w, sess.w.t
	w.stage = stageReport
	if s.skipped(sess, t) {
		return
	}
	if s.opts.slowTask > 0 || s.waitHist != nil || s.runHist != nil {
		s.stamp(sess, t)
	}
	w.n++ // counted before fn runs: a panic or Goexit still uses up the turn
	s.userBegin(sess, userFn)
	if s.interceptors == nil {
		t.job.exec(t, t)
	} else {
		s.intercepted(sess, t)
	}
	w.user = userNone
	s.afterFn(sess, t)
	if t.outcome == outcomeSucceeded {
		// Nothing to report (report does nothing for a task that
		// succeeded: no failure, no halt): the next step advances.
		w.stage = stageDone
	}
}

// skipped fails t, in sess's worker's hand, without running it, and
// reports true: once Shutdown gave up, once Discard ended its session, or
// when its submit ctx ended.
func (s *Scheduler[K]) skipped(sess *session[K], t *task) bool {
	w := &sess.w
	switch {
	case s.core.gaveUp.Load():
		t.job.fail(ErrClosed, outcomeSkipped)
		return true
	case sess.cut.Load() == t:
		t.job.fail(ErrDiscarded, outcomeDiscarded)
		return true
	}
	w.user = userSubmitCtx
	err := t.parent.Err()
	w.user = userNone
	if err != nil {
		t.job.fail(err, outcomeSkipped)
		return true
	}
	return false
}

// stamp notes when t's fn begins, for WithSlowTask and the histograms, and
// records t's queue wait.
func (s *Scheduler[K]) stamp(sess *session[K], t *task) {
	w := &sess.w
	w.began = time.Now()
	if s.waitHist != nil {
		wait := time.Duration(w.began.Sub(s.core.epoch).Nanoseconds() - t.at)
		s.waitHist[t.prio].Observe(wait)
	}
}

// afterFn is the bookkeeping once fn returned, panicked or called Goexit:
// the slot, if an Await lent it, and the run time. Without a limit, a run
// histogram or WithSlowTask there is none: afterFn is inlined, and calls
// timeFn only when there is.
func (s *Scheduler[K]) afterFn(sess *session[K], t *task) {
	if s.timesFn {
		s.timeFn(sess, t)
	}
}

// timeFn is afterFn's bookkeeping: it ends a loan of the slot, and records
// the run time.
func (s *Scheduler[K]) timeFn(sess *session[K], t *task) {
	w := &sess.w
	s.userDone(sess)
	if w.began.IsZero() {
		return
	}
	d := time.Since(w.began)
	w.began = time.Time{}
	if s.runHist != nil {
		s.runHist[t.prio].Observe(d)
	}
	if s.opts.slowTask > 0 && d > s.opts.slowTask {
		s.slowTasks.Add(1)
		s.logSlow(sess, t, d)
	}
}

// advance resolves the task in hand and takes the next, in one lock
// section: it also picks up failures to report that Discard or the
// give-up left, ends the turn when it is over and work remains, and
// lets go of the session when it parks, waits for its rate, or has nothing
// left (retire). It returns the session the goroutine goes on with.
func (s *Scheduler[K]) advance(sess *session[K]) *session[K] {
	w, sh := &sess.w, sess.sh
	if w.inRun {
		if w.n < w.limit && sess.claimNext() { // the turn has room, and the task is not taken back
			s.runNext(sess) // no lock section: see run.go
			return sess
		}
		w.inRun = false // used up, taken back, or the turn is over: the lock section below sees which
	}
	done := w.t
	turnOver := w.turnOver(s.opts.yieldInterval)
	var (
		waiter        *waiter
		yield, passOn bool
		start         *session[K] // a successor released with a goroutine of its own
		next          = sess
	)
	sh.mu.Lock()
	// sess counts as running (sh.running) while its worker has a task in
	// hand, and over the yield of a run it kept, with none: the only time
	// a run is left with no task in hand.
	running := done != nil || sess.runAt > 0
	if done != nil {
		w.t, sess.cur = nil, nil
		sh.count(done)
		waiter = done.resolve() // before the session can be seen idle or gone
	}
	kept := false // sess keeps its run over the turn's yield (see keepRun)
	if sess.runAt > 0 {
		if kept = done != nil && turnOver && s.keepRun(sh, sess); !kept {
			s.endRun(sh, sess)
		}
	}
	if running && !kept {
		sh.running--
	}
	leave := false // the goroutine lets go of sess: parked, paced or retired
	switch {
	case kept:
		s.begin(w)
		w.inRun, yield = true, true
	case len(sess.reports) > 0:
		w.reporting, sess.reports = sess.reports, w.reporting[:0]
	case sess.pause && (sess.drain == nil || sess.queued() > 0):
		s.fire(sh, sess, evPark)
		leave = true
	case w.pace != nil && sess.queued() > 0 && s.paceNext(sh, sess):
		leave = true
	case turnOver && sess.queued() > 0:
		s.begin(w) // the next advance takes the next task, after beginTurn if the turn needs it
		yield = true
		next = s.rq.yield(sh, sess)
	case sess.queued() > 0:
		s.nextTask(sh, sess) // takes one: pick finds a task in a lane that holds one
		if s.runs(sess) {
			s.takeRun(sh, sess)
		}
	default:
		succ, spawned := s.retire(sh, sess)
		if succ != nil && !spawned {
			next = succ // the key goes on in its successor, on this goroutine (see release)
			break
		}
		if spawned {
			start = succ
		}
		leave = true
	}
	if leave {
		if s.opts.maxConcurrency > 0 {
			next, passOn = s.rq.leave(sh, sess)
		} else {
			next = startQueues[K]{s}.startNext(sh) // s.rq.leave, called directly (see runQueue)
		}
	}
	s.unlock(sh)
	if done != nil {
		done.end() // before the waiters wake: they find its ctx done
		if waiter != nil {
			waiter.wake()
		}
	}
	if start != nil {
		go start.start()
	}
	if yield || passOn {
		next = s.rq.moveOn(next, yield, passOn)
	}
	return next
}
