package seqsched

import "sync/atomic"

// The session's life, as one state machine: a session is in one state, and
// an event moves it along one edge of the table edges below, in one place,
// fire. fire asks transition, the table's lookup, where the event takes the
// session, and applies the move's effects: the entry and exit effects of the
// states (idle records, the shard's counts, a new turn, forgetting) and the
// session's live token (see holds). Every move is made under the session's
// shard lock (shard.mu); the live tokens a move gives back are given back
// once that lock is released (Scheduler.unlock), and the goroutine a move
// needs is started then by its caller. The slots' lock (slots.mu) is taken
// inside a shard lock or alone: shard, then slots, is the lock order. No
// user code and no method of a user's value runs under either.
//
// docs/maintainers.md draws the table (every edge, named after its event);
// a test fails when the drawing and the table disagree.
//
// The states:
//
//   - idle: no work and no goroutine; in its shard's map, either as an idle
//     record (no handles: kept for reuse, bounded, the least recently idle
//     evicted, as a clock approximates it; see keepIdle) or pinned by its
//     handles.
//   - ready: has work and waits for a goroutine: in the slots' ready queue
//     under WithMaxConcurrency, otherwise in its shard's start queue while
//     another goroutine is at work on the shard.
//   - running: a goroutine runs its turn (worker.go).
//   - held: a successor (see open) that waits until its predecessor is
//     forgotten; it accepts tasks and runs none.
//   - paused: Pause, or a halt (pause.go), found it with no task running:
//     it accepts tasks and runs none until Resume, with no goroutine and no
//     slot.
//   - paced: WithRate's bucket had no token for its next task (rate.go):
//     it waits on one timer, with no goroutine and no slot; the timer
//     schedules it again.
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
	nStates
)

var stateNames = [...]string{"idle", "ready", "running", "held", "paused", "paced", "gone", "?"}

func (st state) String() string { return stateNames[min(st, nStates)] }

// event is what happens to a session. Every edge of the state machine is
// named after the event that makes it.
type event uint8

const (
	evNone     event = iota
	evSpawn          // a goroutine is started to run it
	evHandOver       // a goroutine of the scheduler already at work goes on with it
	evQueue          // it has work, and waits for a goroutine or a slot
	evYield          // its turn is over while others wait for a slot
	evRetire         // its worker found nothing left to run or report
	evHold           // Open made it behind a closing session of its key
	evRelease        // its predecessor was forgotten, and it has no work
	evPause          // Pause found it with no task running
	evPark           // its worker found its pause set
	evPace           // its next task waits for its rate's token
	evResume         // Resume found it with no work
	evAdmit          // a task for it while it is paused
	evDrop           // Discard or the give-up emptied its queues while it waited
	evForget         // it is taken out of its shard's map
	nEvents
)

var eventNames = [...]string{"none", "spawn", "handOver", "queue", "yield", "retire", "hold", "release",
	"pause", "park", "pace", "resume", "admit", "drop", "forget", "?"}

func (on event) String() string { return eventNames[min(on, nEvents)] }

// edge is one move of the state machine: event on takes a session in from
// to to, when the session's pause is as when says.
type edge struct {
	from state
	on   event
	to   state
	when when
}

// when is the condition of an edge on the session's pause.
type when uint8

const (
	always       when = iota
	ifPaused          // only when its pause is set
	unlessPaused      // only when it is not
)

// edges is the state machine: every move a session can make.
var edges = [...]edge{
	{stateIdle, evSpawn, stateRunning, always},
	{stateIdle, evQueue, stateReady, always},
	{stateIdle, evHold, stateHeld, always},
	{stateIdle, evPause, statePaused, always},
	{stateIdle, evForget, stateGone, always},

	{stateReady, evSpawn, stateRunning, always},
	{stateReady, evHandOver, stateRunning, always},
	{stateReady, evForget, stateGone, always},

	{stateRunning, evRetire, stateIdle, always},
	{stateRunning, evYield, stateReady, always},
	{stateRunning, evPark, statePaused, always},
	{stateRunning, evPace, statePaced, always},
	{stateRunning, evForget, stateGone, always},

	{stateHeld, evSpawn, stateRunning, always},
	{stateHeld, evHandOver, stateRunning, always},
	{stateHeld, evQueue, stateReady, always},
	{stateHeld, evRelease, stateIdle, unlessPaused},
	{stateHeld, evRelease, statePaused, ifPaused},
	{stateHeld, evForget, stateGone, always},

	{statePaused, evAdmit, statePaused, always},
	{statePaused, evDrop, statePaused, always},
	{statePaused, evSpawn, stateRunning, always},
	{statePaused, evQueue, stateReady, always},
	{statePaused, evResume, stateIdle, always},
	{statePaused, evForget, stateGone, always},

	{statePaced, evSpawn, stateRunning, always},
	{statePaced, evQueue, stateReady, always},
	{statePaced, evPause, statePaused, always},
	{statePaced, evDrop, stateIdle, unlessPaused},
	{statePaced, evDrop, statePaused, ifPaused},
	{statePaced, evForget, stateGone, always},
}

// moves indexes edges for transition: moves[from][on][p] is where on takes
// a session in from whose pause is p (1 when set), or nStates for no edge.
var moves = func() (m [nStates][nEvents][2]state) {
	for from := range m {
		for on := range m[from] {
			m[from][on] = [2]state{nStates, nStates}
		}
	}
	for _, e := range edges {
		if e.when != ifPaused {
			m[e.from][e.on][0] = e.to
		}
		if e.when != unlessPaused {
			m[e.from][e.on][1] = e.to
		}
	}
	return m
}()

// transition is the state machine's decision: the state event on takes a
// session in from to, given its pause, and false when no edge leaves from
// on that event.
func transition(from state, on event, paused bool) (state, bool) {
	p := 0
	if paused {
		p = 1
	}
	to := moves[from][on][p]
	return to, to != nStates
}

// holds reports whether a session in st, with work or not, holds a live
// token of its own: one waiting for a goroutine (ready), for its rate's
// token (paced), or paused with work, so that Shutdown waits for it. A
// running session's token is its goroutine's, which that goroutine gives
// back as its last act or when it goes on with a session that held one
// (evHandOver); a goroutine started for a session (evSpawn) takes the
// session's token, or a new one.
func holds(st state, work bool) bool {
	switch st {
	case stateReady, statePaced:
		return true
	case statePaused:
		return work
	}
	return false
}

// fire moves sess on event on, as transition says, and applies the move's
// effects: the session leaves its state (off the idle list, out of the
// shard's paused or paced count, its High burst reset when its worker lets
// it go), enters the new one (an idle record kept, a paused or paced one
// counted, a new turn for a goroutine that takes it, a forgotten one out
// of the map with its drain ended), and its live token follows (see
// holds): one to take is taken now, under the lock that publishes the
// move, so that Shutdown's barrier sees it (see Scheduler.afterSeal); one to
// give back is given back once the lock is released (Scheduler.unlock).
// Called with sh.mu held. A move off the table changes nothing; tests
// (checkMoves) count it.
func (s *Scheduler[K]) fire(sh *shard[K], sess *session[K], on event) {
	from := sess.state
	// Every activation makes these two moves; they are the table's edges
	// and the effects below, written out for them: a session in either
	// state holds no token of its own (see holds), and only running counts
	// as busy. Tests (checkMoves) hold them to the table.
	switch {
	case on == evSpawn && from == stateIdle:
		if checkMoves {
			fastMoveAgrees(sess, on, stateRunning)
		}
		sess.state = stateRunning // on the idle list, if it was (see keepIdle)
		s.begin(&sess.w)
		sh.busy++
		s.addTokens(sh, 1) // the goroutine's
		return
	case on == evRetire && from == stateRunning:
		if checkMoves {
			fastMoveAgrees(sess, on, stateIdle)
		}
		sess.highRun = 0
		sess.state = stateIdle
		sh.busy--
		if sess.handles == 0 {
			s.keepIdle(sh, sess)
		}
		return
	}
	to, ok := transition(from, on, sess.pause)
	if !ok {
		if checkMoves {
			badMoves.Add(1)
		}
		return
	}
	was := sess.busy()
	switch from {
	case statePaused:
		sh.paused--
	case statePaced:
		sh.paced--
	case stateRunning:
		if to != stateReady {
			sess.highRun = 0
		}
	}
	sess.state = to
	switch to {
	case stateIdle:
		if sess.handles == 0 {
			s.keepIdle(sh, sess)
		}
	case statePaused:
		sh.paused++
	case statePaced:
		sh.paced++
	case stateRunning:
		if from != stateHeld { // a successor goes on with its predecessor's turn
			s.begin(&sess.w)
		}
	case stateGone:
		sh.unlistIdle(sess)
		if sh.sessions[sess.key] == sess { // a predecessor a successor replaced is not
			delete(sh.sessions, sess.key)
		}
		if d := sess.drain; d != nil {
			if sess.core.gaveUp.Load() {
				d.err = ErrClosed // Shutdown gave up: accepted tasks may have been dropped
			}
			close(d.done) // the waits of Remove, Discard and Close return
		}
	}
	sh.recount(sess, was)
	tok := holds(to, sess.hasWork())
	n := 0
	if tok {
		n++
	}
	if sess.tok {
		n--
	}
	if on == evSpawn {
		n++
	}
	sess.tok = tok
	if n > 0 {
		s.addTokens(sh, int64(n))
	} else {
		sh.owed -= n
	}
}

// checkMoves is set by the tests (export_test.go) only; badMoves counts the
// moves off the table that fire was asked for, and the written-out moves
// that the table does not make as fire makes them.
var (
	checkMoves bool
	badMoves   atomic.Int64
)

// fastMoveAgrees counts in badMoves a move of fire's written out for on
// that the table does not make: one that transition takes elsewhere than
// to, or one between states where a token is held or owed, which the
// written-out move leaves alone (see holds).
func fastMoveAgrees[K comparable](sess *session[K], on event, to state) {
	got, ok := transition(sess.state, on, sess.pause)
	if !ok || got != to || sess.tok || holds(sess.state, sess.hasWork()) || holds(to, sess.hasWork()) {
		badMoves.Add(1)
	}
}

// unlock releases sh.mu, then gives back the live tokens that the moves
// made under it owe (see fire). Every lock section that fires an event
// ends with it.
func (s *Scheduler[K]) unlock(sh *shard[K]) {
	n := sh.owed
	sh.owed = 0
	sh.mu.Unlock()
	if n != 0 {
		s.addTokens(sh, -int64(n))
	}
}

// base is the untyped part of a session: what its tasks and the waits need
// of it without the key type.
type base struct {
	core *core
	// slot says its worker holds a slot (WithMaxConcurrency); guarded by
	// the shard lock, and by slots.mu too while a loan of it may be out.
	slot bool
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
	// spare is the record's spare parker (see parkers), for the Awaits of
	// its futures; taken and given back atomically, without a lock. A
	// record keeps it when it is recycled, as it keeps core.
	spare spareParker
}

// reset clears b for its record's reuse (see recycle), but for core and
// spare.
func (b *base) reset() {
	b.slot = false
	b.pred.Store(nil)
	b.cut.Store(nil)
	b.loan = loan{}
	b.open.Store(false)
	b.lending.Store(false)
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
// goroutine's turn to a successor, Pause gives back a paced
// session's token, Remove stages a record for the worker it schedules,
// drop clears the slot flag (base.slot, which while a loan of it may be
// out is also guarded by slots.mu: see loan).
type session[K comparable] struct {
	base
	key   K
	sh    *shard[K]
	state state
	tok   bool   // it holds a live token of its own (see holds)
	drain *drain // set once closing: refuse tasks, signal when forgotten

	high, normal fifo
	highRun      int     // consecutive High tasks picked (WithHighBurst)
	cur          *task   // the task its worker has in hand, or has staged (see staged)
	reports      []*task // posted tasks dropped by Discard or the give-up, still to report

	// staged says that cur is a task Submit handed an idle session's new
	// goroutine (see stage): the goroutine takes it by swapping staged to
	// false, and every other lock section that needs the session's lanes
	// as they are puts it back first (unstage, which swaps it too), so
	// that it has not started until the goroutine runs it. Whoever wins
	// the swap owns cur's task; stage wrote cur before it set staged. A
	// flag, not the task pointer: no pointer atomics (a runtime call each,
	// for the write barrier) on the round trip.
	staged atomic.Bool

	// The run its worker took off the Normal lane (see run.go): its first
	// and last task, linked through next, and how many it holds, guarded
	// by sh.mu; runLeft, the unclaimed ones at its end, claimed by the
	// worker and taken back by a lock section, each with one atomic;
	// runAt, its place in sh.runs plus one, 0 when it has no run.
	run     *task
	runLast *task
	runLen  int
	runLeft atomic.Int32
	runAt   int

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

// hasWork reports whether sess has tasks queued or failures to report.
func (sess *session[K]) hasWork() bool { return sess.queued() > 0 || len(sess.reports) > 0 }

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

// admit queues t on sess. It reports whether sess was idle: the caller
// then schedules it in the same lock section (runQueue.schedule), from its
// own frame, since a wake-up's stack is deepest there (see
// Scheduler.accept).
func (s *Scheduler[K]) admit(sh *shard[K], sess *session[K], t *task) (idle bool) {
	t.sess = &sess.base
	sh.submitted++
	sh.queued[t.prio]++
	q := &sess.normal
	if t.prio == High {
		q = &sess.high
	}
	if sess.state == stateIdle {
		// An idle session counts as busy neither before t nor after: the
		// move that schedules it does.
		q.push(t) // it stays on the idle list, if it is on it (see keepIdle)
		return true
	}
	if sess.state == stateRunning && t.prio == Normal {
		q.push(t) // a running session is busy before and after, and nothing else moves
		return false
	}
	if t.prio == High && sess.runLen > 0 {
		s.takeBack(sh, sess) // t goes ahead of them: they have not started
	}
	was := sess.busy()
	q.push(t)
	sh.recount(sess, was)
	if sess.state == statePaused {
		s.fire(sh, sess, evAdmit) // its first work takes a live token
	}
	return false // it runs, waits for a slot, is held or paused: its worker will find t
}

// keepIdle keeps sess, just idle with no handles, as an idle record, and
// forgets the least recently idle record, as a clock approximates it, if
// the shard lists more than its cap.
//
// The idle list is kept lazily, as the CLOCK algorithm keeps pages: a
// listed session that gets work stays listed, so that an activation of an
// idle key makes no list operation, and one that goes idle again while
// listed is marked recent instead of being moved to the front. When the
// list is over its cap, its oldest end is swept: a session that got work
// leaves the list, a recent one goes back to the front unmarked, and the
// first other one is forgotten. fire takes a session off the list when it
// is forgotten, so a forgotten session is never listed, and open takes off
// one a handle pins.
func (s *Scheduler[K]) keepIdle(sh *shard[K], sess *session[K]) {
	if lk := &sess.links[listIdle]; lk.in {
		lk.recent = true
		return
	}
	sh.idle.pushFront(sess)
	for sh.idle.n > s.idleCap {
		old := sh.idle.tail
		switch {
		case old.state != stateIdle: // it got work (a handle takes it off: see open)
			sh.idle.remove(old)
		case old.links[listIdle].recent:
			sh.idle.remove(old)
			sh.idle.pushFront(old)
		default:
			s.fire(sh, old, evForget) // takes it off the list
			s.recycle(old)
		}
	}
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
// untag). It calls nothing, so that nextTask, on a wake-up's stack (see
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
	if sess.drain == nil {
		s.fire(sh, sess, evRetire)
		return nil, false
	}
	s.fire(sh, sess, evForget)
	return s.release(sh, sess, true)
}

// release lets pred's held successor, if any, go on once pred is
// forgotten. When pred's goroutine is at hand (its worker retired it), a
// successor with work (or failures to report) is returned, made running,
// for that goroutine to go on with, with its slot and its turn: the key
// waited its turn already, and keeps its place. Otherwise (no goroutine at
// hand, or under a limit a pred that ran without a slot after the
// give-up lifted it) the successor is scheduled like any session, and
// start says the caller must start its goroutine. One without work is
// released (idle, pinned by its handles, or paused), or, if it closed
// meanwhile, is forgotten in turn, releasing its own successor.
func (s *Scheduler[K]) release(sh *shard[K], pred *session[K], atHand bool) (succ *session[K], start bool) {
	first := pred // the retiring goroutine's session: its slot and turn, whichever successor gets them
	pw := &first.w
	for {
		succ = pred.succ
		if succ == nil {
			return nil, false
		}
		pred.succ, succ.pred = nil, nil
		succ.base.pred.Store(nil)
		switch {
		case succ.hasWork() && atHand && s.rq.handsOver(first):
			w := &succ.w
			succ.slot, first.slot = first.slot, false
			w.n, w.limit, w.turnStart, w.newTurn = pw.n, pw.limit, pw.turnStart, pw.newTurn
			s.fire(sh, succ, evHandOver)
			return succ, false // its advance takes its first task, or yields if the turn is over
		case succ.hasWork():
			if s.rq.schedule(sh, succ) {
				return succ, true
			}
			return nil, false
		case succ.drain == nil:
			s.fire(sh, succ, evRelease)
			return nil, false
		}
		s.fire(sh, succ, evForget)
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
		s.fire(sh, succ, evHold)
		sess = succ
	default:
		sh.unlistIdle(sess)
	}
	sess.handles++
	sess.handled = true
	return sess
}

// close begins closing sess (Remove, Discard, the last Close), unless it is
// closing already, and returns its drain. A session with no goroutine and
// no work (idle, or paused without work) has nothing to drain: it is
// forgotten at once and its drain is ended.
func (s *Scheduler[K]) startClosing(sh *shard[K], sess *session[K]) *drain {
	if sess.drain != nil {
		return sess.drain
	}
	d := &drain{done: make(chan struct{})}
	sess.drain = d
	sh.refuseRoom(sess, nil)
	if sess.state == stateIdle || sess.state == statePaused && !sess.hasWork() {
		s.fire(sh, sess, evForget)
	}
	return d
}

// drop empties sess's queues, failing each task with err (ErrDiscarded, or
// ErrClosed for the give-up) and publishing its outcome; the caller
// wakes their waiters once the lock is released (they are appended to
// resolved); posted ones join sess.reports for its worker to report. A
// session waiting for a goroutine with nothing left to report is forgotten
// at once (or replaced in the queue by its successor); after the
// give-up one with reports is made running. drop returns the session whose
// goroutine the caller must start, if any: sess, or a successor released.
func (s *Scheduler[K]) drop(sh *shard[K], sess *session[K], err error, o outcome, resolved []wakeUp) ([]wakeUp, *session[K]) {
	s.unstage(sh, sess)
	s.takeBack(sh, sess)
	was := sess.busy()
	for {
		t := sh.pick(sess, 0)
		if t == nil {
			break
		}
		t.job.fail(err, o)
		sh.count(t)
		// Published under the lock, as advance does: once the session can
		// be seen gone, every accepted future is resolved.
		resolved = append(resolved, wakeUp{t, t.resolve()})
		if t.job.failure() != nil {
			sess.reports = append(sess.reports, t)
		}
	}
	sh.recount(sess, was)
	switch sess.state {
	case statePaused, statePaced:
		return resolved, s.dropWaiting(sh, sess)
	case stateReady:
	default:
		return resolved, nil // its goroutine, or its release, will report
	}
	if succ := sess.succ; succ != nil && sess.drain != nil && len(sess.reports) == 0 &&
		succ.queued() > 0 && s.rq.replace(sh, sess, succ) {
		// Nothing left to run or report: sess is forgotten now, and its
		// successor takes its place in the ready queue: the key waited its
		// turn already.
		sess.succ, succ.pred = nil, nil
		succ.base.pred.Store(nil)
		s.fire(sh, succ, evQueue)
		s.fire(sh, sess, evForget)
		return resolved, nil
	}
	if len(sess.reports) > 0 && !s.core.gaveUp.Load() {
		// Its failures are reported on its own goroutine when its turn in
		// the ready queue comes, before it is forgotten: its key keeps its
		// place for the successor, if any.
		return resolved, nil
	}
	if !s.rq.unqueue(sh, sess) {
		return resolved, nil // a goroutine took it off the queue and will run it
	}
	if len(sess.reports) == 0 && sess.drain != nil {
		// Nothing left to run or report: forgotten now, with no goroutine.
		// Its successor, if any, has no work (else it took sess's place
		// above), so release starts nothing.
		return resolved, s.forgetIdle(sh, sess)
	}
	// The give-up lifted the limit: what is left needs a goroutine,
	// not a slot.
	sess.slot = false
	s.rq.spawn(sh, sess)
	return resolved, sess
}

// dropWaiting moves on paused or paced sess, whose queues drop just
// emptied (a paced one's timer stopped), and returns the session whose
// goroutine the caller must start, if any: one with failures to report
// is scheduled to report them (a paused one stays paused, and parks again
// once they are reported); a closing one without is forgotten, releasing
// its successor; a paced one without is idle (or paused), and a paused
// one stays paused, with no work.
func (s *Scheduler[K]) dropWaiting(sh *shard[K], sess *session[K]) (start *session[K]) {
	if sess.state == statePaced {
		sess.unpace()
	}
	switch {
	case len(sess.reports) > 0:
		if s.rq.schedule(sh, sess) {
			start = sess
		}
	case sess.drain != nil:
		start = s.forgetIdle(sh, sess)
	default:
		s.fire(sh, sess, evDrop)
	}
	return start
}

// forgetIdle forgets closing sess, which has no goroutine and nothing left
// to run or report, and releases its successor, if any; it returns the
// successor whose goroutine the caller must start, if one was scheduled to
// run at once: sess had no goroutine to hand it.
func (s *Scheduler[K]) forgetIdle(sh *shard[K], sess *session[K]) *session[K] {
	s.fire(sh, sess, evForget)
	if succ, start := s.release(sh, sess, false); start {
		return succ
	}
	return nil
}

// wakeUp is a task resolved under a lock (dropped, or replaced), and the
// waiter its wake-up is for.
type wakeUp struct {
	t *task
	w *waiter
}

// wake finishes u's task once the lock is released: its ctx ends (which
// stops its watch on the submit ctx, a method of the caller's value), and
// its waiter wakes.
func (u wakeUp) wake() {
	u.t.end()
	if u.w != nil {
		u.w.wake()
	}
}

// fifo is one lane of a session: a singly linked FIFO of tasks. A task
// in no lane has a nil next (a new one's is zero, pop clears it, and
// stage takes only a lane's lone task, whose next is nil), so that push
// need not store it: while the GC marks, each pointer store pays a write
// barrier.
type fifo struct {
	head, tail *task
	n          int
}

func (q *fifo) push(t *task) {
	if q.tail == nil {
		q.head = t
	} else {
		q.tail.next = t
	}
	q.tail = t
	q.n++
}

// pushFront puts t back first, where it was popped from.
func (q *fifo) pushFront(t *task) {
	t.next = q.head
	if q.head == nil {
		q.tail = t
	}
	q.head = t
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

// nextTask puts sess's next task (see pick) in its worker's hand, to run;
// the room it leaves in its lane goes to a caller waiting for it, if any.
// What only per-key control needs is in nextTaskControlled: nextTask is on
// a wake-up's stack (see Scheduler.accept).
func (s *Scheduler[K]) nextTask(sh *shard[K], sess *session[K]) *task {
	t := sh.pop(sess, s.opts.highBurst)
	sess.w.t, sess.cur = t, t
	if t == nil {
		return nil
	}
	sess.w.stage = stageRun
	sh.running++
	if t.flags&flagTagged != 0 || sess.w.pace != nil || sess.ctl != nil && sh.waiters > 0 {
		t = s.nextTaskControlled(sh, sess)
	}
	return t
}

// nextTaskControlled is nextTask's part for per-key control, with the node just popped in
// hand: a tagged node gives way to the task it stands for, a paced key's
// token is spent, and a caller waiting for room gets it.
func (s *Scheduler[K]) nextTaskControlled(sh *shard[K], sess *session[K]) *task {
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

// stage hands t, the only task of sess, just spawned from idle by
// Submit, to the goroutine Submit starts, in the lock section that
// admitted it: t is taken off its lane and counted as running (as
// nextTask does), and the goroutine takes it with one swap (see
// Scheduler.claim) instead of a lock section of its own. Until then it
// has not started: Pause, Discard, the give-up and Queued put it back
// (unstage) and see it queued, and the goroutine finds it in its lane.
// Only a session that no per-key control, queue bound or slot limit
// touches is staged (see Scheduler.accept).
func (s *Scheduler[K]) stage(sh *shard[K], sess *session[K], t *task) {
	// pop, written out for a lane that holds t alone (sess was idle).
	if t.prio == High {
		sess.high = fifo{}
		sess.highRun++
	} else {
		sess.normal = fifo{}
		sess.highRun = 0
	}
	sh.queued[t.prio]--
	sh.running++
	sess.cur = t
	sess.w.first = true
	sess.staged.Store(true)
}

// unstage puts sess's staged task, if its goroutine has not taken it,
// back at the head of its lane, as it was before stage. Called with
// sh.mu held.
func (s *Scheduler[K]) unstage(sh *shard[K], sess *session[K]) {
	if !sess.staged.Swap(false) {
		return
	}
	t := sess.cur
	if t.prio == High {
		sess.high.pushFront(t)
	} else {
		sess.normal.pushFront(t)
	}
	sh.queued[t.prio]++
	sh.running--
	sess.cur = nil
	sess.highRun = 0 // an idle session's, before stage
}

// claim takes the task stage handed sess's goroutine into its hand, to
// run, and reports whether it did: false when there was none, or when a
// lock section put it back first (unstage).
func (s *Scheduler[K]) claim(sess *session[K]) bool {
	w := &sess.w
	if !w.first {
		return false
	}
	w.first = false
	if !sess.staged.Swap(false) {
		return false
	}
	w.t, w.stage = sess.cur, stageRun // stage's, read after the swap that won it
	return true
}
