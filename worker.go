package seqsched

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// The worker: a goroutine that runs sessions' turns, one task at a time.

// work runs turns on the calling goroutine, starting with sess and moving
// on, once a session is idle, to sessions waiting for a goroutine: in the
// ready queue while a slot is held (WithMaxConcurrency), else in the
// shard's start queue; it returns when there is nothing to run. The
// goroutine holds one live token, given back as its last act.
//
// in is the turn sess is in when a goroutine takes over (see takeOver), and
// done the task it finishes first; nil starts a new turn. The first task
// to run may wait in sess.first, taken off the queue for this goroutine.
//
// User code runs at four places on this goroutine: fn, the WithWeight
// function, the logger, and a submitter's ctx's Err in skip. Any of them
// may call runtime.Goexit; the deferred takeOver then carries the work on
// from the locals below on a fresh goroutine.
func (s *Scheduler[K]) work(sess *session[K], done *task, in *turn) {
	var (
		t      *task // the task being run, from skip until done takes it
		ran    bool  // t's fn returned: what runs now is bookkeeping and logs
		next   *task // the task to run next, off the queue already
		tn     turn
		at     = atTask // where user code runs, for takeOver
		normal bool     // the goroutine returns normally
	)
	if checkTokens && s.slack.Add(-1) < 0 {
		tokenViolations.Add(1) // a worker started without a token
	}
	defer func() {
		if !normal {
			s.takeOver(sess, t, ran, next, tn, at)
		}
	}()
	beginTurn := func() { // runs the WithWeight function: user code
		at = atWeight
		s.beginTurn(&tn, sess)
		at = atTask
	}
	next, sess.first = sess.first, nil // one lock less per activation
	if in != nil {
		tn = *in
	} else {
		beginTurn()
	}
	for {
		var more bool
		if next != nil {
			t, next = next, nil
		} else {
			st := s.finishAndTake(sess, done, s.turnOver(&tn))
			t, more = st.next, st.more
			if done != nil {
				if st.published { // the session retired: finishAndTake published done under its lock
					done.job.wake(st.waiter)
				} else {
					resolve(done.job) // after the lock: finishAndTake counted it Completed first
				}
				done.over()
			}
			st.drain.end() // after the last future of the session resolved
			done = nil
			if then := st.then; then != nil { // sess went idle; then waited in the start queue
				sess, next, t = then, t, nil // t is then's first task (nil if a forced Shutdown emptied then)
				beginTurn()
				continue
			}
		}
		switch {
		case t != nil:
			if !s.skip(t) {
				tn.n++ // counted before fn runs: a Goexit still uses up the turn
				s.runTask(sess, t, &ran)
				ran = false
			}
			done, t = t, nil
		case more: // the turn is over and the session still has work
			key := sess.key // sess may be taken over by another goroutine once it yields
			var yielded bool
			sess, yielded = s.yield(sess)
			if yielded {
				at = atBetween
				s.log(slog.LevelDebug, "seqsched: session yielded", key)
			}
			if sess == nil { // a resumer took the slot
				normal = true
				s.exit()
				return
			}
			beginTurn()
		default: // the session went idle
			if sess = s.nextReady(); sess == nil {
				normal = true
				s.exit()
				return
			}
			beginTurn()
		}
	}
}

// Where a worker runs user code, for takeOver.
const (
	atTask    = iota // in skip or run: t's ctx, fn, or the logs after it
	atWeight         // the WithWeight function, or the log of a bad weight
	atBetween        // the log of a yield: sess, if not nil, starts a new turn
)

// exit is a worker goroutine's last act: it gives back its live token.
func (s *Scheduler[K]) exit() {
	if checkTokens {
		s.slack.Add(1)
	}
	s.release(1)
}

// finishAndTake, under the session's shard lock, does the bookkeeping of done (which
// the caller resolves once finishAndTake returns, or wakes if finishAndTake published it) and
// takes the session's next task.
// It returns next == nil with more set when turnOver and work remains, and
// with more unset when the session has gone idle (retire): the caller must
// then leave sess alone, as a Submit may already have activated it again.
// A session gone idle hands the goroutine, and its live token, on to the
// oldest session of the shard's start queue, if any, returned as then; next
// is then then's first task, taken in the same lock section (nil only if a
// forced Shutdown emptied then's queues).
func (s *Scheduler[K]) finishAndTake(sess *session[K], done *task, turnOver bool) (st stepped[K]) {
	sh := sess.sh
	sh.mu.Lock()
	if done != nil {
		sh.running--
		sh.completed[done.prio]++
		if done.skipped {
			sh.skipped++
			if sess.drain != nil && s.forced.Load() {
				sess.drain.err = ErrClosed // Shutdown gave up: the drain is cut short
			}
		}
	}
	if turnOver && sess.len() > 0 {
		sh.mu.Unlock()
		return stepped[K]{more: true}
	}
	if st.next = sh.takeNext(sess, s.opts.highBurst); st.next != nil {
		sh.mu.Unlock()
		return st
	}
	if done != nil {
		// Published before the session can be seen idle or gone: a Remove
		// that then returns nil finds every accepted future resolved. The
		// waiters wake after the lock.
		st.waiter, st.published = done.job.publish(), true
	}
	var forgotten *session[K]
	forgotten, st.drain = sh.retire(sess, s.idleCap)
	if s.opts.maxConcurrency == 0 {
		if st.then = sh.pending.pop(); st.then == nil {
			sh.workers-- // the goroutine is about to exit
		} else {
			st.next = sh.takeNext(st.then, s.opts.highBurst)
		}
	}
	sh.mu.Unlock()
	if forgotten != nil {
		s.recycle(forgotten)
	}
	return st
}

// stepped is what finishAndTake returns.
type stepped[K comparable] struct {
	next      *task
	more      bool
	then      *session[K]
	drain     *drain
	published bool    // done was published under the lock (the session retired)
	waiter    *waiter // done's waiter, to wake
}

// dropped is what a forced Shutdown took off a shard's queues: published
// under the shard lock, so that a Remove that returns finds them resolved,
// then woken, their ctxs ended and their failures reported after it.
type dropped struct {
	tasks   []*task
	waiters []*waiter
}

// publish fails t with ErrClosed and publishes it. Called with sh.mu held.
func (d *dropped) publish(t *task) {
	t.job.fail(ErrClosed)
	d.tasks = append(d.tasks, t)
	d.waiters = append(d.waiters, t.job.publish())
}

// finish wakes what publish published. Called with no lock held.
func (d *dropped) finish() {
	for i, t := range d.tasks {
		t.job.wake(d.waiters[i])
		t.over()
		t.job.report()
	}
}

// takeOver runs on a worker goroutine that runtime.Goexit is unwinding,
// called from user code (see work). The goroutine cannot be saved; a fresh
// one carries on from where it stopped, with the live token, the slot and
// the turn tn (so a Goexit cannot lengthen a turn):
//   - t set: t's fn called Goexit (ran unset) or a log after it did; the
//     new goroutine finishes t and goes on with sess;
//   - at atWeight: the WithWeight function (or the log of a bad weight)
//     did; sess starts its turn with weight 1, next still first;
//   - at atBetween: the log of a yield did; sess, if any, starts a turn.
//
// This goroutine takes a token of its own before it hands the work on, and
// gives it back as its last act (deferred, so a logger that calls Goexit
// here too loses nothing): Shutdown cannot return while it logs.
func (s *Scheduler[K]) takeOver(sess *session[K], t *task, ran bool, next *task, tn turn, at int) {
	s.takeToken()
	defer s.exit()
	var key K // for the log: sess may be recycled once the new goroutine runs
	if sess != nil {
		key = sess.key
	}
	switch {
	case t != nil:
		if ran { // a log after fn did: the task's outcome stands
			go s.work(sess, t, &tn)
			return
		}
		// fn called Goexit, or a submitter's ctx did in skip.
		if ls := t.lentSlot(); ls != nil {
			s.settle(ls)
		}
		s.panics.Add(1)
		// The new goroutine resolves t: the failure is reported first, so
		// that a Remove or Shutdown that returns finds it reported. Deferred,
		// so that a handler or logger calling Goexit here too loses nothing.
		defer func() { go s.work(sess, t, &tn) }()
		t.job.report()
		s.log(slog.LevelError, "seqsched: task called runtime.Goexit", key)
	case at == atWeight:
		sess.first = next
		tn = turn{limit: s.opts.yieldAfter}
		if s.opts.yieldInterval > 0 {
			tn.start = time.Now()
		}
		go s.work(sess, nil, &tn)
		s.badWeight(key, "called runtime.Goexit")
	case sess == nil: // a yield's log, after a resumer took the slot
		s.release(1) // the token the work held: nothing carries on
	default:
		sess.first = next
		go s.work(sess, nil, nil)
	}
}

// log writes one record about session key. A panicking handler (in Enabled
// or Handle) must not take a worker down with it, so its panic is dropped.
func (s *Scheduler[K]) log(level slog.Level, msg string, key K, attrs ...slog.Attr) {
	defer func() { _ = recover() }() // before Enabled: it runs handler code too
	l := s.opts.logger
	ctx := context.Background()
	if !l.Enabled(ctx, level) {
		return
	}
	l.LogAttrs(ctx, level, msg, append(attrs, slog.Any("session", key))...)
}

// turn is the state of a session's turn on a worker goroutine.
type turn struct {
	n     int       // tasks run in this turn
	limit int       // tasks the turn may run: yieldAfter × weight
	start time.Time // when it began; only with WithYieldInterval
}

func (s *Scheduler[K]) beginTurn(tn *turn, sess *session[K]) {
	tn.n, tn.limit = 0, s.opts.yieldAfter
	if s.weight != nil {
		tn.limit *= s.weightOf(sess.key)
	}
	if s.opts.yieldInterval > 0 {
		tn.start = time.Now()
	}
}

// turnOver reports whether the turn has run its count of tasks or, with
// WithYieldInterval, its time (after at least one task).
func (s *Scheduler[K]) turnOver(tn *turn) bool {
	if tn.n >= tn.limit {
		return true
	}
	return s.opts.yieldInterval > 0 && tn.n > 0 && time.Since(tn.start) >= s.opts.yieldInterval
}

// weightOf calls the WithWeight function. A weight out of range, or a panic,
// is logged once per scheduler and counts as 1.
func (s *Scheduler[K]) weightOf(key K) (w int) {
	defer func() {
		if r := recover(); r != nil {
			s.badWeight(key, fmt.Sprintf("panic: %v", r))
			w = 1
		}
	}()
	w = s.weight(key)
	if w < MinWeight || w > MaxWeight {
		s.badWeight(key, fmt.Sprintf("weight %d out of range %d..%d", w, MinWeight, MaxWeight))
		return 1
	}
	return w
}

func (s *Scheduler[K]) badWeight(key K, why string) {
	if s.weightLogged.CompareAndSwap(false, true) {
		s.log(slog.LevelError, "seqsched: WithWeight: "+why+"; using weight 1 (logged once)", key)
	}
}

// skip fails t instead of starting it, and reports true, when Shutdown gave
// up or t's submit ctx ended before t could start. The submit ctx's Err is
// the submitter's code: a panic there fails t with a *PanicError, and a
// runtime.Goexit with ErrGoexit (the worker's takeOver then goes on).
func (s *Scheduler[K]) skip(t *task) (skipped bool) {
	if s.forced.Load() {
		t.job.fail(ErrClosed) // no task starts after Shutdown gave up
		t.job.report()
		return true
	}
	normal := false
	defer func() {
		if normal {
			return
		}
		if r := recover(); r != nil {
			t.job.fail(&PanicError{Value: r, Stack: debug.Stack()})
			skipped = true
			s.panics.Add(1)
			t.job.report()
			return
		}
		t.job.fail(ErrGoexit) // takeOver reports it
	}()
	err := t.parent.Err()
	normal = true
	if err != nil {
		t.job.fail(err)
		t.job.report()
		return true
	}
	return false
}

// runTask starts task t of sess on the calling goroutine, sets *ran once fn has
// returned, and does the bookkeeping its options ask for.
func (s *Scheduler[K]) runTask(sess *session[K], t *task, ran *bool) {
	var start time.Time
	if s.opts.slowTask > 0 || s.hist != nil {
		start = time.Now()
		if s.hist != nil {
			s.hist[t.prio].record(time.Duration(start.Sub(s.epoch).Nanoseconds() - t.at))
		}
	}
	perr := t.job.exec()
	*ran = true
	if ls := t.lentSlot(); ls != nil {
		s.settle(ls) // before the user code below
	}
	t.job.report() // before the logs: a logger that calls Goexit must not lose it
	if perr != nil {
		s.panics.Add(1)
		s.log(slog.LevelError, "seqsched: task panicked", sess.key, slog.Any("panic", perr.Value), slog.String("stack", string(perr.Stack)))
	}
	if s.opts.slowTask > 0 {
		if d := time.Since(start); d > s.opts.slowTask {
			s.slowTasks.Add(1)
			s.log(slog.LevelWarn, "seqsched: slow task", sess.key, slog.String("priority", t.prio.String()), slog.Duration("duration", d))
		}
	}
}
