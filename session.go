package seqsched

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// queue is an intrusive FIFO of tasks.
type queue struct {
	head, tail *task
	n          int
}

func (q *queue) push(t *task) {
	t.next = nil
	if q.tail == nil {
		q.head = t
	} else {
		q.tail.next = t
	}
	q.tail = t
	q.n++
}

func (q *queue) pop() *task {
	t := q.head
	if t == nil {
		return nil
	}
	q.head = t.next
	if q.head == nil {
		q.tail = nil
	}
	t.next = nil
	q.n--
	return t
}

// lanes are a session's two FIFOs. Its address identifies the session to
// the deadlock guard.
type lanes struct {
	high, normal queue
	highRun      int   // High tasks started in a row (for WithHighBurst; see started)
	core         *core // the scheduler's untyped half; set once, when the session is made
}

// pop takes the oldest High task, else the oldest Normal one. With a burst
// cap (burst > 0), after burst High tasks in a row one waiting Normal task
// goes first.
func (l *lanes) pop(burst int) *task {
	if burst > 0 && l.highRun >= burst && l.normal.n > 0 {
		return l.started(l.normal.pop())
	}
	if l.high.n > 0 {
		return l.started(l.high.pop())
	}
	return l.started(l.normal.pop())
}

// started counts t, the task about to run (nil if none), in the run of High
// tasks in a row that WithHighBurst caps, and returns it. pop calls it, and
// so does Submit for the first task of an idle session, which it hands to
// the session's new goroutine without a pop.
func (l *lanes) started(t *task) *task {
	if t != nil && t.prio == High {
		l.highRun++
	} else {
		l.highRun = 0
	}
	return t
}

func (l *lanes) len() int { return l.high.n + l.normal.n }

// session is one key's queues and turn. It is made when an unknown key gets
// a task. When its queues empty it retires: it stays in its shard's map as
// an idle record until its key gets work again or it is dropped (see
// retire and Remove); once forgotten it is recycled through the pool.
// Fields are guarded by sh.mu unless their comment says otherwise; run and
// lanes.core are set once, when the session is made.
type session[K comparable] struct {
	lanes
	key K
	sh  *shard[K]
	// scheduled is set while the session owns a goroutine or waits for
	// one (in the ready queue or its shard's start queue); a Submit that
	// finds it unset schedules it.
	scheduled bool
	drain     *drain // set by Remove: refuse new tasks, signal when empty
	first     *task  // handed by Submit, or a starter, to the goroutine about to run sess; read by that goroutine only
	// nextReady links the ready queue (guarded by slots.mu) under
	// WithMaxConcurrency, and the shard's start queue (guarded by sh.mu)
	// without it.
	nextReady *session[K]
	// Links in the shard's record list (see shard.idleHead), while listed.
	idlePrev, idleNext *session[K]
	reused             bool // active again since it was listed or last passed over (see evictOldest)
	// Handles (see Session): pins counts the open handles; a pinned session
	// is never an idle record (never listed, counted in nidle or evicted).
	// handled marks a session a handle ever held: it is never recycled, so
	// that gone, set when it is forgotten, stays true for its handles.
	pins    int
	handled bool
	gone    bool
	run     func() // starts this session's turn; made once, so `go run()` allocates nothing
}

// drain is what Remove waits on: done is closed when the session has
// emptied, been forgotten, and every future of its tasks has resolved. err
// is ErrClosed when a forced shutdown cut it short.
type drain struct {
	done chan struct{}
	err  error
}

// end reports the drain complete; nil-safe.
func (d *drain) end() {
	if d != nil {
		close(d.done)
	}
}

// shard is one lock's worth of sessions. Keys are spread over shards by
// hash so that producers and sessions on different cores rarely contend.
type shard[K comparable] struct {
	mu        sync.Mutex
	sessions  map[K]*session[K]
	queued    [2]int    // tasks waiting in this shard's sessions, by priority
	completed [2]uint64 // futures resolved (counted before they resolve), by priority
	running   int       // sessions of this shard executing a task
	submitted uint64    // tasks accepted
	skipped   uint64    // tasks resolved without running
	// Idle records: sessions with no work, kept in sessions for reuse (see
	// retire). The record list holds every idle record, newest listed first, and
	// may hold sessions that became active again since they were listed:
	// they are not taken off it, so that reusing a record touches no other
	// session. nidle counts the idle records.
	idleHead, idleTail *session[K]
	nidle              int
	pinnedIdle         int  // idle sessions held by a handle (not records)
	evictTick          uint // retirements that found the records full
	// Without WithMaxConcurrency: sessions activated while a goroutine was
	// already at work on this shard wait in the start queue (pending)
	// instead of each getting a new goroutine. A worker whose session goes
	// idle takes the oldest; a starter (see Scheduler.start) makes sure one
	// is taken even while every worker is busy in a task. workers counts
	// the goroutines running this shard's sessions; starter is set while a
	// starter is on its way.
	pending waiting[K]
	workers int
	starter bool
	start   func() // runs Scheduler.start for this shard; made once, so `go start()` allocates nothing
	_       [64]byte
}

// retire ends sess's activity: it has no work left. A drained session
// (Remove) is forgotten; any other stays in the map as an idle record, so
// that its key's next task finds it without a map insert and delete, and
// without a trip through the pool. When idleCap records are kept already,
// sess is mostly forgotten instead, and every evictEvery-th time the
// oldest record is (see evictOldest). retire returns the session it
// forgot, if any, for the caller to recycle once sh.mu is released, and the
// drain of a drained session, which the caller ends (d.end) once it has
// resolved every future it still holds: a Remove that returns finds every
// accepted future resolved. Called with sh.mu held.
func (sh *shard[K]) retire(sess *session[K], idleCap int) (forgotten *session[K], d *drain) {
	sess.scheduled = false
	sess.highRun = 0
	if d = sess.drain; d != nil {
		sess.drain = nil
		sh.forget(sess)
		return sess, d
	}
	if sess.pins > 0 { // held by a handle: kept, not an idle record
		sh.pinnedIdle++
		return nil, nil
	}
	if sh.nidle >= idleCap {
		// Full. Mostly forget sess itself, which is in cache, rather than
		// the oldest record, which is not: keys that cycle through more
		// sessions than the list holds then cost what they did without
		// one. Every evictEvery-th time the oldest goes instead, so that
		// records of keys that never return age out.
		if sh.evictTick++; sh.evictTick%evictEvery != 0 {
			sh.forget(sess)
			return sess, nil
		}
		if forgotten = sh.evictOldest(sess); forgotten != nil {
			sh.drop(forgotten)
		}
	}
	if !sh.listed(sess) {
		sh.list(sess)
	}
	sh.nidle++
	return forgotten, nil
}

// evictEvery: see retire.
const evictEvery = 8

// evictOldest returns the idle record to forget when the records are full:
// the oldest on the list, with a second chance for records reused since
// they were listed (they go back to the head, as if new; a clock, not
// an exact LRU). On the way it takes off the list the sessions that are
// active again, which return to it when they retire, and sess, which is
// retiring. Called with sh.mu held.
func (sh *shard[K]) evictOldest(sess *session[K]) *session[K] {
	for t := sh.idleTail; t != nil; t = sh.idleTail {
		switch {
		case t == sess || t.scheduled || t.pins > 0:
			sh.unlist(t)
		case t.reused:
			sh.unlist(t)
			sh.list(t)
		default:
			return t
		}
	}
	return nil
}

// list puts sess at the head of the record list. Called with sh.mu held.
func (sh *shard[K]) list(sess *session[K]) {
	sess.idleNext, sess.idlePrev = sh.idleHead, nil
	if sh.idleHead != nil {
		sh.idleHead.idlePrev = sess
	} else {
		sh.idleTail = sess
	}
	sh.idleHead = sess
	sess.reused = false
}

// listed reports whether sess is on the record list. Called with sh.mu
// held.
func (sh *shard[K]) listed(sess *session[K]) bool {
	return sess.idlePrev != nil || sh.idleHead == sess
}

// unlist takes sess off the record list. Called with sh.mu held.
func (sh *shard[K]) unlist(sess *session[K]) {
	if sess.idlePrev != nil {
		sess.idlePrev.idleNext = sess.idleNext
	} else {
		sh.idleHead = sess.idleNext
	}
	if sess.idleNext != nil {
		sess.idleNext.idlePrev = sess.idlePrev
	} else {
		sh.idleTail = sess.idlePrev
	}
	sess.idleNext, sess.idlePrev = nil, nil
	sess.reused = false
}

// unidle makes sess, an idle record, active again. It stays on the record
// list, marked reused: taking it off would touch its neighbours, which are
// other sessions' cache lines. Called with sh.mu held.
func (sh *shard[K]) unidle(sess *session[K]) {
	sess.reused = true
	sh.nidle--
}

// forget deletes sess from the map, and from the record list if it is
// listed. Every session not in the pool is in its shard's map under its
// key, and a key has one session at a time, so the entry is sess. Called
// with sh.mu held.
func (sh *shard[K]) forget(sess *session[K]) {
	if sh.listed(sess) {
		sh.unlist(sess)
	}
	delete(sh.sessions, sess.key)
	sess.gone, sess.pins = true, 0
}

// drop forgets sess, an idle record. Called with sh.mu held.
func (sh *shard[K]) drop(sess *session[K]) {
	sh.nidle--
	sh.forget(sess)
}

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
	next, sess.first = sess.first, nil // one lock less per activation
	if in != nil {
		tn = *in
	} else {
		at = atWeight
		s.startTurn(&tn, sess)
		at = atTask
	}
	for {
		var more bool
		if next != nil {
			t, next = next, nil
		} else {
			st := s.step(sess, done, s.turnOver(&tn))
			t, more = st.next, st.more
			if done != nil {
				if st.published { // the session retired: step published done under its lock
					done.job.wake(st.waiter)
				} else {
					done.job.resolve() // after the lock: step counted it Completed first
				}
				done.over()
			}
			st.drain.end() // after the last future of the session resolved
			done = nil
			if then := st.then; then != nil { // sess went idle; then waited in the start queue
				sess, next, t = then, t, nil // t is then's first task (nil if a forced Shutdown emptied then)
				at = atWeight
				s.startTurn(&tn, sess)
				at = atTask
				continue
			}
		}
		switch {
		case t != nil:
			if !s.skip(t) {
				tn.n++ // counted before fn runs: a Goexit still uses up the turn
				s.run(sess, t, &ran)
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
			at = atWeight
			s.startTurn(&tn, sess)
			at = atTask
		default: // the session went idle
			if sess = s.nextReady(); sess == nil {
				normal = true
				s.exit()
				return
			}
			at = atWeight
			s.startTurn(&tn, sess)
			at = atTask
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

// step, under the session's shard lock, does the bookkeeping of done (which
// the caller resolves once step returns, or wakes if step published it) and
// takes the session's next task.
// It returns next == nil with more set when turnOver and work remains, and
// with more unset when the session has gone idle (retire): the caller must
// then leave sess alone, as a Submit may already have activated it again.
// A session gone idle hands the goroutine, and its live token, on to the
// oldest session of the shard's start queue, if any, returned as then; next
// is then then's first task, taken in the same lock section (nil only if a
// forced Shutdown emptied then's queues).
func (s *Scheduler[K]) step(sess *session[K], done *task, turnOver bool) (st stepped[K]) {
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
	if st.next = sh.take(sess, s.opts.highBurst); st.next != nil {
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
			st.next = sh.take(st.then, s.opts.highBurst)
		}
	}
	sh.mu.Unlock()
	if forgotten != nil {
		s.recycle(forgotten)
	}
	return st
}

// stepped is what step returns (see step).
type stepped[K comparable] struct {
	next      *task
	more      bool
	then      *session[K]
	drain     *drain
	published bool    // done was published under the lock (the session retired)
	waiter    *waiter // done's waiter, to wake
}

// take pops sess's next task, if any, and counts it running. Called with
// sh.mu held.
func (sh *shard[K]) take(sess *session[K], burst int) *task {
	t := sess.pop(burst)
	if t != nil {
		sh.queued[t.prio]--
		sh.running++
	}
	return t
}

// start is a starter: a goroutine started for sh's start queue. It takes
// the oldest waiting session and runs it; if more wait, it first starts
// the next starter, since the session it runs may block in a task for
// ever. A starter that finds the queue emptied by workers exits.
func (s *Scheduler[K]) start(sh *shard[K]) {
	sh.mu.Lock()
	sess := sh.pending.pop()
	if sess == nil {
		sh.starter = false
		sh.mu.Unlock()
		s.release(1)
		return
	}
	sh.workers++
	sess.first = sh.take(sess, s.opts.highBurst) // as Submit does for a goroutine it starts
	more := sh.pending.head != nil
	sh.starter = more
	if more {
		s.takeToken() // the next starter's, under the lock as in enqueue
	}
	sh.mu.Unlock()
	if more {
		go sh.start()
	}
	s.work(sess, nil, nil)
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
		go s.work(sess, t, &tn)
		s.log(slog.LevelError, "seqsched: task called runtime.Goexit", key)
		t.job.report() // reads only the task's own outcome, which the new goroutine leaves alone
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

// make creates key's session, idle. Called with sh.mu held.
func (sh *shard[K]) make(s *Scheduler[K], key K) *session[K] {
	sess := s.pool.Get().(*session[K])
	sess.key, sess.sh, sess.gone = key, sh, false
	if sh.sessions == nil {
		sh.sessions = make(map[K]*session[K])
	}
	sh.sessions[key] = sess
	return sess
}

// wake makes sess, idle, active again. Called with sh.mu held.
func (sh *shard[K]) wake(sess *session[K]) {
	if sess.pins > 0 {
		sh.pinnedIdle--
	} else {
		sh.unidle(sess)
	}
}
