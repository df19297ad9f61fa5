package seqsched

import (
	"fmt"
	"time"
)

// A worker is one goroutine's worth of the scheduler's work. It runs
// sessions' turns, one task at a time, moving on when a session goes idle
// to sessions waiting for a goroutine (the ready queue under
// WithMaxConcurrency, else its shard's start queue); a starter is a worker
// that begins by taking a session from a start queue, and a reporter one
// that reports the failures of posted tasks that Discard or a forced
// Shutdown dropped. A worker holds one live token from the moment it is
// decided on (under the lock that publishes it) to its last act, and a
// slot, under WithMaxConcurrency, while it runs a session.
//
// Everything a worker knows is in its struct, and it moves in steps: each
// step does its work and sets next. Before a step calls user code it sets
// next to where to go on, and stages what the code's runtime.Goexit would
// mean (the task's outcome, a log to write); carryOn then only has to
// start the same worker on a new goroutine (see callsite.go).
type worker[K comparable] struct {
	s      *Scheduler[K]
	id     *ident
	run    func() // w.goroutine as a method value, made once: `go w.run()` allocates nothing
	loopFn func() // w.loop, likewise, for tagged

	next step
	site site // the user code running now, or siteNone

	sh      *shard[K]   // a starter's shard
	sess    *session[K] // the session whose turn it runs
	slot    bool        // it holds a slot (WithMaxConcurrency)
	tn      turn
	t       *task // the task in hand
	ret     retirement[K]
	began   time.Time // when w.t's fn began; only with WithSlowTask or a histogram
	logs    logs[K]   // records still to write, and what they say
	goexit  outcome   // staged: w.t's outcome if the user code running now calls Goexit
	lent    lentSlot
	dropped []*task // a reporter's tasks; i is the next to report
	i       int
	drains  []*drain // drains that wait for a reporter, with their shards
	dshards []*shard[K]
}

type step uint8

const (
	stepExit     step = iota
	stepStarter       // take the oldest session of w.sh's start queue
	stepTurn          // begin a turn on w.sess: the WithWeight function
	stepStart         // w.t in hand: skip it, or go on to run it
	stepAfter         // settle w.t's slot and time after fn
	stepReport        // hand w.t's failure to WithErrorHandler (or the log)
	stepLog           // write the records staged in w.logs
	stepAdvance       // finish w.t and take the next task, under the lock
	stepYield         // the turn is over and the session has work
	stepIdle          // the session retired: move on or exit
	stepReporter      // report w.dropped
)

// newWorker makes a worker for s's pool.
func (s *Scheduler[K]) newWorker() any {
	w := &worker[K]{s: s}
	w.id = newIdent(w)
	w.run, w.loopFn = w.goroutine, w.loop
	return w
}

// worker returns a worker from the pool, about to start at next.
func (s *Scheduler[K]) worker(next step) *worker[K] {
	w := s.workers.Get().(*worker[K])
	w.next = next
	return w
}

// startWorker starts a worker on sess, which holds a live token and, under
// WithMaxConcurrency, a slot for it; sess.cur, if set, is its first task,
// taken off its queue already (see activate). The worker is taken from the
// pool on its own goroutine, where it goes back: both on one P, the
// pool's cheap path. sess.launch is made once, so `go` allocates nothing.
func (s *Scheduler[K]) startWorker(sess *session[K]) {
	go sess.launch()
}

// launch runs a worker on sess, on the calling goroutine (see startWorker).
func (s *Scheduler[K]) launch(sess *session[K]) {
	w := s.worker(stepTurn)
	w.sess, w.t, w.slot = sess, sess.cur, s.opts.maxConcurrency > 0
	w.goroutine()
}

// goroutine runs w on the calling goroutine until it exits, under its
// identity's tags. If user code calls runtime.Goexit, carryOn takes over.
func (w *worker[K]) goroutine() {
	if checkTokens && w.s.slack.Add(-1) < 0 {
		tokenViolation() // a worker started without a token
	}
	if w.goexit != outcomeNone { // this goroutine takes over after a Goexit
		w.t.job.settle(ErrGoexit, w.goexit)
		w.goexit = outcomeNone
	}
	normal := false
	defer func() {
		if !normal && w.site != siteNone {
			w.carryOn()
		}
	}()
	tagged(w.id.index, w.loopFn)
	normal = true
	s := w.s
	w.reset()
	s.workers.Put(w)
	s.exit() // last: Shutdown may return once the token is back
}

// carryOn runs on a worker goroutine that runtime.Goexit, called from user
// code, is unwinding. What the Goexit means was staged before the call
// (w.next, the task's outcome, w.logs), so the same worker only has to go
// on from there on a new goroutine, with its live token, slot, session and
// task. No user code runs here.
func (w *worker[K]) carryOn() {
	if w.site.isCallback() {
		w.s.core.callbacks.Add(-1)
	}
	w.site = siteNone
	if checkTokens {
		w.s.slack.Add(1) // this goroutine's share; the next one takes it again
	}
	go w.run()
}

// reset clears w for the pool.
func (w *worker[K]) reset() {
	// Only what outlives a task or a session: the rest is set before use.
	w.sh, w.sess, w.t, w.slot, w.i = nil, nil, nil, false, 0
	if len(w.dropped) > 0 {
		clear(w.dropped)
		clear(w.drains)
		clear(w.dshards)
		w.dropped, w.drains, w.dshards = w.dropped[:0], w.drains[:0], w.dshards[:0]
	}
	w.ret.reset()
	w.logs.written()
}

func (w *worker[K]) loop() {
	for {
		switch w.next {
		case stepExit:
			return
		case stepStarter:
			w.starter()
		case stepTurn:
			w.beginTurn()
		case stepStart:
			w.start()
		case stepAfter:
			w.after()
		case stepReport:
			w.report()
		case stepLog:
			w.writeLogs()
		case stepAdvance:
			w.advance()
		case stepYield:
			w.yield()
		case stepIdle:
			w.idle()
		case stepReporter:
			w.reportDropped()
		}
	}
}

// starter takes the oldest session of its shard's start queue and runs it;
// if more wait, it first starts the next starter, since the session it runs
// may block in a task for ever. A starter that finds the queue emptied by
// workers exits.
func (w *worker[K]) starter() {
	s, sh := w.s, w.sh
	sh.mu.Lock()
	sess := sh.pending.pop()
	if sess == nil {
		sh.starterOnWay = false
		sh.mu.Unlock()
		w.next = stepExit
		return
	}
	sh.workers++
	sh.pickNext(sess, s.opts.highBurst) // nil only if a forced Shutdown emptied it
	more := sh.pending.head != nil
	sh.starterOnWay = more
	if more {
		s.takeToken() // the next starter's, under the lock as in activate
		s.startStarter(sh)
	}
	sh.mu.Unlock()
	w.sess, w.t, w.next = sess, sess.cur, stepTurn
}

// startStarter starts a starter for sh's start queue; its live token is
// taken. sh.starterFn is made once, so `go` allocates nothing.
func (s *Scheduler[K]) startStarter(sh *shard[K]) {
	go sh.starterFn()
}

// runStarter runs a starter for sh on the calling goroutine.
func (s *Scheduler[K]) runStarter(sh *shard[K]) {
	w := s.worker(stepStarter)
	w.sh = sh
	w.goroutine()
}

// turn is the state of a session's turn.
type turn struct {
	n     int       // tasks run in this turn
	limit int       // tasks the turn may run: yieldAfter × weight
	start time.Time // when it began; only with WithYieldInterval
}

// beginTurn starts a turn on w.sess: yieldAfter tasks, times the
// WithWeight function's weight (user code).
func (w *worker[K]) beginTurn() {
	s := w.s
	w.tn = turn{limit: s.opts.yieldAfter}
	if s.opts.yieldInterval > 0 {
		w.tn.start = time.Now()
	}
	after := stepAdvance // take the first task
	if w.t != nil {
		after = stepStart // handed over with the session
	}
	if s.weight == nil {
		w.next = after
		return
	}
	w.next, w.logs.after = stepLog, after
	w.logs.set(logWeight) // staged: a Goexit counts as weight 1, logged
	w.logs.weightWhy = "called runtime.Goexit"
	weight, perr := callback(w, siteWeight, callWeight[K], weightCall[K]{fn: s.weight, key: w.sess.key})
	switch {
	case perr != nil:
		w.logs.weightWhy = fmt.Sprintf("panic: %v", perr.Value)
	case weight < MinWeight || weight > MaxWeight:
		w.logs.weightWhy = fmt.Sprintf("weight %d out of range %d..%d", weight, MinWeight, MaxWeight)
	default:
		w.logs.clear(logWeight)
		w.tn.limit *= weight
		w.next = after
	}
}

type weightCall[K comparable] struct {
	fn  func(K) int
	key K
}

func callWeight[K comparable](c weightCall[K]) int { return c.fn(c.key) }

// turnOver reports whether the turn has run its count of tasks or, with
// WithYieldInterval, its time (after at least one task).
func (w *worker[K]) turnOver() bool {
	if w.tn.n >= w.tn.limit {
		return true
	}
	d := w.s.opts.yieldInterval
	return d > 0 && w.tn.n > 0 && time.Since(w.tn.start) >= d
}

// advance finishes w.t, if any, and takes the session's next task, in one
// lock section. When the turn is over and work remains it goes on to
// yield; when the session's queues are empty it retires it, and then goes
// on with a released successor or, without WithMaxConcurrency, the oldest
// session of the shard's start queue, if any.
func (w *worker[K]) advance() {
	s, sess := w.s, w.sess
	sh := sess.sh
	done := w.t
	if done != nil {
		done.job.release() // let go of what fn captured
	}
	turnOver := w.turnOver()
	var waiter *waiter
	published := false
	sh.mu.Lock()
	if done != nil {
		sh.running--
		sh.count(done)
		if done.outcome == outcomeSkipped && sess.closing != nil && s.forced.Load() {
			sess.closing.err = ErrClosed // Shutdown gave up: the drain is cut short
		}
	}
	switch {
	case turnOver && sess.len() > 0:
		sess.cur, w.t = nil, nil
		w.next = stepYield
	case sh.pickNext(sess, s.opts.highBurst) != nil:
		w.t, w.next = sess.cur, stepStart
	default:
		w.t = nil
		if done != nil {
			// Published before the session can be seen idle or gone: a
			// Remove that then returns nil finds every accepted future
			// resolved. The waiters wake after the lock.
			waiter, published = done.job.publish(), true
		}
		s.retire(sh, sess, &w.ret) // a released successor is taken with its queues as they are
		if w.ret.then == nil && s.opts.maxConcurrency == 0 {
			if w.ret.then = sh.pending.pop(); w.ret.then == nil {
				sh.workers-- // the goroutine is about to move on or exit
			} else {
				w.t = sh.pickNext(w.ret.then, s.opts.highBurst) // nil only if a forced Shutdown emptied it
			}
		}
		w.next = stepIdle
	}
	sh.mu.Unlock()
	if done == nil {
		s.finish(&w.ret)
		return
	}
	if published {
		done.job.wake(waiter)
	} else {
		resolve(done.job)
	}
	s.finish(&w.ret) // after the last future of the session resolved
	if done.hasCtxState() {
		// Ending the task's ctx stops its watches, which may run the
		// submit ctx's code: w.next is set already, where a Goexit there
		// goes on.
		callback(w, siteCtxStop, endCtx, done)
	}
}

func endCtx(t *task) struct{} { t.over(); return struct{}{} }

// yield ends w.sess's turn (see Scheduler.yield).
func (w *worker[K]) yield() {
	next := w.s.yield(w.sess)
	if next == nil {
		w.next = stepExit
		return
	}
	w.sess, w.next = next, stepTurn
}

// idle moves on from a session that retired: to the session advance
// handed over (a successor, or the oldest of the start queue), else to the
// ready queue's head; with neither it exits.
func (w *worker[K]) idle() {
	w.sess = nil
	if then := w.ret.then; then != nil {
		successor := w.ret.successor
		w.ret.then, w.ret.successor = nil, false
		w.sess = then
		if successor {
			// The key's turn goes on in its successor: advance yields if
			// the turn is over, as it would have in the predecessor.
			w.next = stepAdvance
			return
		}
		w.next = stepTurn // w.t, if set, is its first task
		return
	}
	if sess := w.s.passSlot(); sess != nil {
		w.sess, w.next = sess, stepTurn
		return
	}
	w.slot = false
	w.next = stepExit
}
