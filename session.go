package seqsched

import "sync/atomic"

// The session's life, as one state machine. Every move is made by one of
// the methods below, under the session's shard lock (shard.mu), and each is
// named after the event that causes it. The slots' lock (slots.mu) is
// taken inside a shard lock or alone: shard, then slots, is the lock
// order. No user code and no method of a user's value runs under either.
//
//	         admit (first task)               pick (queues empty)
//	 idle ─────────────────────▶ running ─────────────────────▶ idle
//	  │  ▲                     ▲  │   ▲                           (kept as an idle record,
//	  │  │  admit, no slot     │  │   │ slot                       or pinned by handles)
//	  │  └──────────┐  ready ──┘  │   │
//	  │             │    ▲  yield │   │
//	  │             │    └────────┘   │
//	  │ close       │ release (pred forgotten)
//	  ▼             │
//	gone ◀──── held (a successor, made by Open while its key's session
//	  ▲              closes; it takes tasks, runs none until released)
//	  └──── running/ready with drain set, queues empty: forget
//
// The states:
//
//   - idle: no work and no goroutine; in its shard's map, either as an idle
//     record (no handles: kept for reuse, bounded, oldest evicted; see
//     shard.go) or pinned by its handles.
//   - ready: has work and waits for a goroutine: in the slots' ready queue
//     under WithMaxConcurrency, otherwise in its shard's start queue while
//     another goroutine is at work on the shard; it holds a live token.
//   - running: a goroutine runs its turn (worker.go) and holds a live token.
//   - held: a successor (see open) that waits until its predecessor is
//     forgotten; it accepts tasks and runs none.
//   - paused: Pause, or a halt (pause.go), found it with no task running:
//     it accepts tasks and runs none until Resume, with no goroutine and no
//     slot; with work it holds a live token, so Shutdown waits for it. It
//     is reached from idle and paced (Pause), running (its worker parks
//     it) and held (released while paused), and left for idle, ready or running
//     (Resume), or gone (Discard, or Remove of one with no work).
//   - paced: WithRate's bucket had no token for its next task (rate.go):
//     it waits on one timer, with no goroutine and no slot, holding a live
//     token; the timer schedules it again (ready or running). Discard or a
//     forced Shutdown stops the timer: gone, idle or paused; so does Pause:
//     paused.
//   - gone: forgotten, out of the map; its handles refuse tasks.
//
// Closing (Remove, Discard, the last handle's Close) is not a state of its
// own: a session with drain set refuses tasks and is forgotten as soon as
// it has nothing left to run or report. An idle session that closes is
// forgotten at once.
type state uint8

const (
	stateIdle state = iota
	stateReady
	stateRunning
	stateHeld
	statePaused
	statePaced
	stateGone
)

// base is the untyped part of a session: what its tasks and the waits need
// of it without the key type.
type base struct {
	core  *core
	owner any // the *session[K] this is the base of
	// pred is the closing session this one waits behind (a held
	// successor), or nil. Read without the lock by the re-entry check.
	pred atomic.Pointer[base]
	// cut is the running task whose ctx Discard ended (see Cause).
	cut atomic.Pointer[task]
	// loan is the state of the slot a task or callback of this session
	// lends while it waits (see slots.go); guarded by slots.mu. open is
	// set while the session's worker runs user code that may lend it, and
	// lending once a wait tried to (see worker.userDone).
	loan          loan
	open, lending atomic.Bool
}

// behind reports whether a wait for work of session b, by a caller running
// on session c's worker, could only end after that caller returns: b is c,
// or a successor held (transitively) behind c.
func (b *base) behind(c *base) bool {
	for x := b; x != nil; x = x.pred.Load() {
		if x == c {
			return true
		}
	}
	return false
}

// discarded reports whether Discard ended t's ctx while t ran.
func (b *base) discarded(t *task) bool { return b.cut.Load() == t }

// session is one key's queues, its place in the state machine, and the
// state of the goroutine that runs its turn (w). Fields are guarded by
// sh.mu, except w: the goroutine running the session reads and writes it
// without a lock. While the session has no goroutine (idle, ready, held,
// paused, paced) w is written only under sh.mu: release hands a retiring
// goroutine's turn and slot to a successor, Pause gives back a paced
// session's token, Remove stages a record for the worker it schedules,
// drop clears the slot flag; and w.slot, while a loan of it may be out,
// under slots.mu (see loan).
type session[K comparable] struct {
	base
	key   K
	sh    *shard[K]
	state state
	drain *drain // set once closing: refuse tasks, signal when forgotten

	high, normal fifo
	highRun      int     // consecutive High tasks picked (WithHighBurst)
	cur          *task   // the task its worker has in hand
	reports      []*task // posted tasks dropped by Discard or a forced Shutdown, still to report

	handles int  // open handles; a session with handles is never an idle record
	handled bool // a handle ever held it
	pause   bool // Pause, or a halt: start no task until Resume (see pause.go)

	// ctl is the per-key control a session uses (Replace tags, callers
	// waiting for room, its rate), made the first time one is used: a
	// session that uses none costs one nil pointer.
	ctl *control

	pred, succ *session[K]      // a held successor's predecessor, and the reverse
	links      [nLists]links[K] // its places in the idle list and the ready queue (list.go)

	start func() // starts a goroutine on the session (Scheduler.work); made once
	w     worker[K]
}

// busy reports whether the session counts in Stats.Sessions: it has work,
// queued or running.
func (sess *session[K]) busy() bool {
	switch sess.state {
	case stateReady, stateRunning, statePaced:
		return true
	case stateHeld, statePaused:
		return sess.high.n+sess.normal.n > 0
	}
	return false
}

// queued is how many tasks wait in the session's lanes.
func (sess *session[K]) queued() int { return sess.high.n + sess.normal.n }

// moves are the edges of the diagram above: moves[from] has bit to set
// when a session may go from one to the other.
var moves = [...]uint8{
	stateIdle:    1<<stateReady | 1<<stateRunning | 1<<stateHeld | 1<<statePaused | 1<<stateGone,
	stateReady:   1<<stateRunning | 1<<stateGone,
	stateRunning: 1<<stateIdle | 1<<stateReady | 1<<statePaused | 1<<statePaced | 1<<stateGone,
	stateHeld:    1<<stateIdle | 1<<stateReady | 1<<stateRunning | 1<<statePaused | 1<<stateGone,
	statePaused:  1<<stateIdle | 1<<stateReady | 1<<stateRunning | 1<<stateGone,
	statePaced:   1<<stateIdle | 1<<stateReady | 1<<stateRunning | 1<<statePaused | 1<<stateGone,
	stateGone:    0,
}

// move sets sess's state, keeping the shard's count of busy sessions. It
// is the one place a state is written. Tests (checkMoves) count every move
// that is not an edge of the diagram.
func (sh *shard[K]) move(sess *session[K], to state) {
	if checkMoves && moves[sess.state]&(1<<to) == 0 {
		badMoves.Add(1)
	}
	was := sess.busy()
	switch sess.state {
	case statePaused:
		sh.paused--
	case statePaced:
		sh.paced--
	}
	switch to {
	case statePaused:
		sh.paused++
	case statePaced:
		sh.paced++
	}
	sess.state = to
	sh.recount(sess, was)
}

// checkMoves is set by the tests (export_test.go) only; badMoves counts the
// moves off the diagram it found.
var (
	checkMoves bool
	badMoves   atomic.Int64
)

// recount adjusts the busy count after sess's queues changed, given whether
// it was busy before.
func (sh *shard[K]) recount(sess *session[K], was bool) {
	switch now := sess.busy(); {
	case now && !was:
		sh.busy++
	case was && !now:
		sh.busy--
	}
}

// admit queues t on sess and, when sess has no goroutine, schedules it. It
// reports whether the caller must start a goroutine on sess once the lock
// is released.
func (s *Scheduler[K]) admit(sh *shard[K], sess *session[K], t *task) (start bool) {
	was := sess.busy()
	t.sess = &sess.base
	sh.submitted++
	sh.queued[t.prio]++
	if t.prio == High {
		sess.high.push(t)
	} else {
		sess.normal.push(t)
	}
	sh.recount(sess, was)
	if sess.state != stateIdle {
		if sess.state == statePaused && sess.queued() == 1 && len(sess.reports) == 0 {
			s.takeToken() // its first work while paused (see pause.go)
		}
		return false // it runs, waits for a slot, is held or paused: its worker will find t
	}
	sh.unlistIdle(sess)
	return s.schedule(sh, sess)
}

// schedule makes idle (or just released) sess runnable: running with a
// goroutine to start, or ready, waiting in the slots' queue (under a
// limit) or in its shard's start queue (see shard.pending). Either way it
// takes a live token, under the lock that publishes the move, so that
// Shutdown's barrier sees it (see Scheduler.live).
func (s *Scheduler[K]) schedule(sh *shard[K], sess *session[K]) (start bool) {
	s.takeToken()
	if s.slots.max == 0 && sh.workers > 0 {
		sh.move(sess, stateReady)
		sh.pending.pushBack(sess)
		if !sh.starterOnWay {
			sh.starterOnWay = true
			s.takeToken() // the starter's
			go sh.starter()
		}
		return false
	}
	if !s.claimSlot(sess) {
		sh.move(sess, stateReady)
		return false
	}
	s.run(sh, sess)
	return true
}

// pick takes sess's next task for its worker: the oldest High one, else
// the oldest Normal one, unless WithHighBurst says a Normal one is due. It
// returns nil when both queues are empty.
func (sh *shard[K]) pick(sess *session[K], burst int) *task {
	t := sh.pop(sess, burst)
	if t != nil && t.flags&flagTagged != 0 {
		t = sess.untag(t)
	}
	return t
}

// pop is pick without Replace's tags: it returns the node it took off a
// queue, and a tagged node stands for the task that last replaced it (see
// untag). It calls nothing, so that take, on a wake-up's stack (see
// Scheduler.accept), needs no frame for it.
func (sh *shard[K]) pop(sess *session[K], burst int) *task {
	var t *task
	if sess.high.n > 0 && (burst == 0 || sess.highRun < burst || sess.normal.n == 0) {
		t = sess.high.pop()
		sess.highRun++
	} else if t = sess.normal.pop(); t != nil {
		sess.highRun = 0
	}
	if t != nil {
		sh.queued[t.prio]--
	}
	return t
}

// retire moves sess, whose worker found nothing left to run or report: a
// closing session is forgotten, and its successor, if any, released (see
// release), which it returns for the calling goroutine to go on with; any
// other becomes idle, an idle record unless handles pin it.
func (s *Scheduler[K]) retire(sh *shard[K], sess *session[K]) (succ *session[K], start bool) {
	sess.highRun = 0
	if sess.drain == nil {
		sh.move(sess, stateIdle)
		if sess.handles == 0 {
			s.keepIdle(sh, sess)
		}
		return nil, false
	}
	sh.forget(sess)
	return s.release(sh, sess)
}

// release lets pred's held successor, if any, go on once pred is
// forgotten. One with work (or failures to report) is returned, made
// running, for the goroutine that retired pred to run with its slot and its
// turn: the key waited its turn already, and keeps its place. Under a limit,
// a pred that ran without a slot (after a forced Shutdown lifted the limit)
// has none to give: its successor is scheduled like any session, and start
// says the caller must start its goroutine. One without
// work becomes idle, pinned by its handles, or, if it closed meanwhile, is
// forgotten in turn, releasing its own successor.
func (s *Scheduler[K]) release(sh *shard[K], pred *session[K]) (succ *session[K], start bool) {
	pw := &pred.w // the retiring goroutine's: its slot and turn, whichever successor gets them
	for {
		succ = pred.succ
		if succ == nil {
			return nil, false
		}
		pred.succ, succ.pred = nil, nil
		succ.base.pred.Store(nil)
		switch {
		case (succ.queued() > 0 || len(succ.reports) > 0) && s.slots.max > 0 && !pw.slot:
			if s.schedule(sh, succ) {
				return succ, true
			}
			return nil, false
		case succ.queued() > 0 || len(succ.reports) > 0:
			sh.move(succ, stateRunning)
			w := &succ.w
			w.slot, pw.slot = pw.slot, false
			w.n, w.limit, w.turnStart, w.newTurn = pw.n, pw.limit, pw.turnStart, pw.newTurn
			return succ, false // its advance takes its first task, or yields if the turn is over
		case succ.drain == nil && succ.pause:
			sh.move(succ, statePaused)
			return nil, false
		case succ.drain == nil:
			sh.move(succ, stateIdle)
			return nil, false
		}
		sh.forget(succ)
		pred = succ
	}
}

// open counts a new handle on key's session, making the session if key has
// none; a closing session gets a successor, held behind it, so that a new
// handle never joins a closing session and key's tasks never overlap.
func (s *Scheduler[K]) open(sh *shard[K], key K) *session[K] {
	sess := sh.sessions[key]
	switch {
	case sess == nil:
		sess = s.makeSession(sh, key)
	case sess.drain != nil:
		succ := s.makeSession(sh, key) // replaces sess in the map
		succ.pred, sess.succ = sess, succ
		succ.base.pred.Store(&sess.base)
		succ.pause = sess.pause // Pause applies to the key: its next session too
		sh.move(succ, stateHeld)
		sess = succ
	default:
		sh.unlistIdle(sess)
	}
	sess.handles++
	sess.handled = true
	return sess
}

// close begins closing sess (Remove, Discard, the last Close), unless it is
// closing already, and returns its drain. An idle session has nothing to
// drain: it is forgotten at once and its drain is ended.
func (s *Scheduler[K]) close(sh *shard[K], sess *session[K]) *drain {
	if sess.drain != nil {
		return sess.drain
	}
	d := &drain{done: make(chan struct{})}
	sess.drain = d
	sh.refuseRoom(sess, nil)
	switch {
	case sess.state == stateIdle:
		sh.unlistIdle(sess)
		sh.forget(sess)
	case sess.state == statePaused && !sess.hasWork():
		sh.forget(sess)
	}
	return d
}

// drop empties sess's queues, failing each task with err (ErrDiscarded, or
// ErrClosed for a forced Shutdown) and publishing its outcome; the caller
// wakes their waiters once the lock is released (they are appended to
// resolved); posted ones join sess.reports for its worker to report. A
// session waiting for a goroutine with nothing left to report is forgotten
// at once (or replaced in the queue by its successor); after a forced
// Shutdown one with reports is made running. drop returns the session whose
// goroutine the caller must start, if any: sess, or a successor released.
func (s *Scheduler[K]) drop(sh *shard[K], sess *session[K], err error, o outcome, resolved []dropped) ([]dropped, *session[K]) {
	was := sess.busy()
	parkedWork := sess.state == statePaced || sess.state == statePaused && sess.hasWork() // it holds a live token
	for {
		t := sh.pick(sess, 0)
		if t == nil {
			break
		}
		t.job.fail(err, o)
		sh.count(t)
		// Published under the lock, as advance does: once the session can
		// be seen gone, every accepted future is resolved.
		resolved = append(resolved, dropped{t, t.job.publish()})
		if t.job.failure() != nil {
			sess.reports = append(sess.reports, t)
		}
	}
	sh.recount(sess, was)
	if sess.state == statePaused || sess.state == statePaced {
		return resolved, s.dropParked(sh, sess, parkedWork)
	}
	if sess.state != stateReady {
		return resolved, nil // its goroutine, or its release, will report
	}
	if succ := sess.succ; succ != nil && sess.drain != nil && len(sess.reports) == 0 &&
		succ.queued() > 0 && s.replaceReady(sh, sess, succ) {
		// Nothing left to run or report: sess is forgotten now, and its
		// successor takes its place in the ready queue, with its live
		// token: the key waited its turn already.
		sess.succ, succ.pred = nil, nil
		succ.base.pred.Store(nil)
		sh.forget(sess)
		sh.move(succ, stateReady)
		return resolved, nil
	}
	if len(sess.reports) > 0 && !s.core.forced.Load() {
		// Its failures are reported on its own goroutine when its turn in
		// the ready queue comes, before it is forgotten: its key keeps its
		// place for the successor, if any.
		return resolved, nil
	}
	if !s.unqueue(sh, sess) {
		return resolved, nil // a goroutine took it off the queue and will claim it
	}
	if len(sess.reports) == 0 && sess.drain != nil {
		// Nothing left to run or report: forgotten now, with no goroutine.
		// Its successor, if any, has no work (else it took sess's place
		// above), so release starts nothing.
		s.releaseToken()
		return resolved, s.forgetIdle(sh, sess)
	}
	// A forced Shutdown lifted the limit: what is left needs a goroutine,
	// not a slot. The live token sess held in the queue passes to it.
	sess.w.slot = false
	s.run(sh, sess)
	return resolved, sess
}

// dropParked moves on paused or paced sess, whose queues drop just
// emptied (a paced one's timer stopped), and returns the session whose
// goroutine the caller must start, if any: one with failures to report
// gets a goroutine to report them (a paused one stays paused, and parks
// again once they are reported); a closing one without is forgotten,
// releasing its successor; a paced one without is idle (or paused). tok
// says sess held a parked session's live token, given back once a new one
// is taken.
func (s *Scheduler[K]) dropParked(sh *shard[K], sess *session[K], tok bool) (start *session[K]) {
	if sess.state == statePaced {
		sess.unpace()
	}
	switch {
	case len(sess.reports) > 0:
		if s.schedule(sh, sess) {
			start = sess
		}
	case sess.drain != nil:
		start = s.forgetIdle(sh, sess)
	case sess.state == statePaced && sess.pause:
		sh.move(sess, statePaused)
	case sess.state == statePaced:
		sh.move(sess, stateIdle)
		if sess.handles == 0 {
			s.keepIdle(sh, sess)
		}
	}
	if tok {
		s.releaseToken()
	}
	return start
}

// forgetIdle forgets closing sess, which has no goroutine and nothing left
// to run or report, and releases its successor, if any; it returns the
// successor whose goroutine the caller must start, if one was made running:
// sess had no goroutine to lend it, so it gets one of its own.
func (s *Scheduler[K]) forgetIdle(sh *shard[K], sess *session[K]) *session[K] {
	sh.forget(sess)
	succ, start := s.release(sh, sess)
	if succ != nil && !start {
		s.takeToken()
		if s.slots.max == 0 {
			sh.workers++
		}
	}
	return succ
}

// dropped is a task drop resolved, and the waiter its wake-up is for.
type dropped struct {
	t *task
	w *waiter
}

// forget takes sess out of its shard's map (if it is still there: a
// predecessor that a successor replaced is not), moves it to gone, and ends
// its drain: the waits of Remove, Discard and Close return.
func (sh *shard[K]) forget(sess *session[K]) {
	if sh.sessions[sess.key] == sess {
		delete(sh.sessions, sess.key)
	}
	sh.move(sess, stateGone)
	if d := sess.drain; d != nil {
		if sess.core.forced.Load() {
			d.err = ErrClosed // Shutdown gave up: accepted tasks may have been dropped
		}
		close(d.done)
	}
}

// fifo is one lane of a session: a singly linked FIFO of tasks.
type fifo struct {
	head, tail *task
	n          int
}

func (q *fifo) push(t *task) {
	t.next = nil
	if q.tail == nil {
		q.head = t
	} else {
		q.tail.next = t
	}
	q.tail = t
	q.n++
}

func (q *fifo) pop() *task {
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

// take puts sess's next task (see pick) in its worker's hand, to run;
// the room it leaves in its lane goes to a caller waiting for it, if any.
// What only per-key control needs is in took: take is on a wake-up's
// stack (see Scheduler.accept).
func (s *Scheduler[K]) take(sh *shard[K], sess *session[K]) *task {
	t := sh.pop(sess, s.opts.highBurst)
	sess.w.t, sess.cur = t, t
	if t == nil {
		return nil
	}
	sess.w.stage = stageRun
	sh.running++
	if t.flags&flagTagged != 0 || sess.w.pace != nil || sess.ctl != nil && sh.waiters > 0 {
		t = s.took(sh, sess)
	}
	return t
}

// took is take's part for per-key control, with the node just popped in
// hand: a tagged node gives way to the task it stands for, a paced key's
// token is spent, and a caller waiting for room gets it.
func (s *Scheduler[K]) took(sh *shard[K], sess *session[K]) *task {
	t := sess.w.t
	if t.flags&flagTagged != 0 {
		t = sess.untag(t)
		sess.w.t, sess.cur = t, t
	}
	if sess.w.pace != nil {
		sess.w.pace.reserved = false // the task took its token
	}
	if sess.ctl != nil && sh.waiters > 0 {
		s.makeRoom(sh, sess, t.prio)
	}
	return t
}
