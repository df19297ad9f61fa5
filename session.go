package seqsched

// session is one key's queues and turn, and the record of its state. Every
// move between states is one of the named operations below, made under its
// shard's lock (sh.mu); the slots' lock (slots.mu) is only ever taken inside
// it or alone (lock order: shard, then slots). Fields are guarded by sh.mu
// unless their comment says otherwise.
//
// States:
//
//   - unknown: no record in the shard's map. make creates one: a task by
//     key makes it active, Open makes it pinned.
//   - idle record: in the map and on the shard's record list, not
//     scheduled, no tasks, no handles; counted in nidle (keepIdle decides
//     how many are kept, evictOldest which goes). A task by key makes it
//     active again.
//   - pinned: idle, but held by handles (handles > 0), or a successor held
//     back with no work: in the map, never listed or evicted; counted in
//     pinnedIdle (see setRest).
//   - waiting: scheduled, with work, no goroutine: in the ready queue
//     (WithMaxConcurrency; the slots' sessionFIFO) or its shard's start
//     queue (shard.pending).
//   - running: scheduled, a worker runs its turn (worker.go); cur is the
//     task it has in hand.
//   - closing: running or waiting, with closing set (Remove, Discard, the
//     last handle's Close): no task is accepted; retire forgets it once its
//     queues are empty. Discard also empties its queues (discard).
//   - held back: made by Open while the key's session was closing (a
//     successor): in the map, accepting tasks, pinned by its handle, but
//     not scheduled until retire forgets its predecessor and releases it.
//   - forgotten: out of the map (forget). Recycled through the pool unless
//     a handle ever held it (then gone stays true for its handles).
//
// The operations, all in this file: make, activate (a task for a session
// without a goroutine: schedule it), close (begin closing), discard,
// succeed (a successor), retire (its worker found its queues empty; it
// releases a successor), forget and finish, and what an idle session is
// counted as: keepIdle, listIdle, evictOldest, pin and setRest (the record
// list's own links are shard.go's list and unlist; a session's queues,
// enqueue and pickNext, are in lanes.go).
//
// How a session retires, for a reader: its worker's advance (worker.go)
// finds its queues empty and calls retire, here, under the shard lock;
// retire forgets a closing session (forget; its drain's settle), or keeps
// it pinned (setRest) or as an idle record (keepIdle, evictOldest);
// finish, after the lock, ends the drains and recycles what was
// forgotten; the worker then goes on (idle, in worker.go) with a released
// successor, the start queue's oldest, or a slot's next session. Remove, Discard and Close begin it with close
// (end.go waits for the drain); a forced Shutdown cuts it short in abort.
type session[K comparable] struct {
	lanes
	key K
	sh  *shard[K]
	// scheduled is set while the session owns a worker or waits for one;
	// a task for a session with it unset activates it.
	scheduled bool
	closing   *drain      // set by close: refuse new tasks, signal once forgotten
	cur       *task       // the task its worker has in hand; Discard cancels its ctx
	link      *session[K] // next in the ready queue (guarded by slots.mu) or the start queue
	// A successor (see succeed): pred is the closing session it waits for,
	// succ the successor waiting for this one.
	pred, succ *session[K]
	// Links in the shard's record list (see shard.idleHead), while listed.
	idlePrev, idleNext *session[K]
	reused             bool // active again since it was listed or last passed over (see evictOldest)
	rest               rest // what it is counted as while it has no worker (see shard.setRest)
	handles            int  // open handles; a session with handles is never an idle record
	handled            bool // a handle ever held it: never recycled, so that gone stays true
	gone               bool
	launch             func() // starts a worker on it (Scheduler.launch); made once
}

// drain is what Remove, Discard and the last Close wait on: done is closed
// once the session is forgotten, every future of its tasks has resolved and
// every failure of its posted tasks was reported. pending counts what must
// still happen (the session's retirement, a reporter's reports); err is
// ErrClosed when a forced Shutdown cut the session short. Guarded by sh.mu,
// but done.
type drain struct {
	done    chan struct{}
	pending int
	err     error
}

// end closes d.done; nil-safe. Called with no lock held.
func (d *drain) end() {
	if d != nil {
		close(d.done)
	}
}

// settle counts one pending end of d and returns d if it was the last (for
// the caller to end once the lock is released). Called with sh.mu held.
func (d *drain) settle() *drain {
	if d.pending--; d.pending == 0 {
		return d
	}
	return nil
}

// make creates key's session, not scheduled and not listed. Called with
// sh.mu held.
func (sh *shard[K]) make(s *Scheduler[K], key K) *session[K] {
	sess := s.pool.Get().(*session[K])
	sess.key, sess.sh, sess.gone, sess.lanes.mu = key, sh, false, &sh.mu
	if sh.sessions == nil {
		sh.sessions = make(map[K]*session[K])
	}
	sh.sessions[key] = sess
	return sess
}

// activate schedules sess, which has just got work and has no goroutine.
// It reports whether the caller must start a worker on it once sh.mu is
// released (the worker then holds the live token and slot taken here, and
// sess.cur is its first task, taken off the queue), or a starter for the
// shard's start queue. Otherwise sess waits in the ready queue with a
// token of its own, or in the start queue. Called with sh.mu held.
func (s *Scheduler[K]) activate(sh *shard[K], sess *session[K]) (start, starter bool) {
	sess.scheduled = true
	if s.opts.maxConcurrency == 0 && sh.workers > 0 {
		// A worker is at work on this shard: it takes sess when its own
		// session goes idle, or a starter does, whichever is first.
		// sess takes no live token: while the start queue is not empty,
		// a starter holding one is on its way.
		sh.pending.push(sess)
		if !sh.starterOnWay {
			sh.starterOnWay, starter = true, true
			s.takeToken() // the starter's; under the lock, so Shutdown's barrier sees it
		}
		return false, starter
	}
	s.takeToken() // sess's; under the lock, so Shutdown's barrier sees it
	if !s.claimSlot(sess) {
		return false, false
	}
	sh.pickNext(sess, s.opts.highBurst)
	if s.opts.maxConcurrency == 0 {
		sh.workers++
	}
	return true, false
}

// close begins closing sess (Remove, Discard, the last Close), unless it
// is closing already, and returns its drain. An unscheduled session has
// nothing to drain: it is forgotten at once, and the drain returned is
// ended (done closed) with its successor, if any, released. Called with
// sh.mu held; the caller must call s.recycle(sess) after the lock when
// forgotten is true.
func (s *Scheduler[K]) close(sh *shard[K], sess *session[K]) (d *drain, forgotten bool) {
	if sess.closing != nil {
		return sess.closing, false
	}
	d = &drain{done: make(chan struct{}), pending: 1}
	if s.forced.Load() {
		d.err = ErrClosed // accepted tasks may have been dropped
	}
	sess.closing = d
	if sess.scheduled || sess.pred != nil {
		return d, false // retire (or its predecessor's) forgets it
	}
	sh.forget(sess)
	d.pending = 0
	close(d.done)
	return d, true
}

// discard empties sess's queues for Discard: each task is failed with
// ErrDiscarded and published, and appended to dropped for the caller to
// wake and report once the lock is released. Called with sh.mu held, on a
// closing session.
func (sh *shard[K]) discard(sess *session[K], dropped []*task) []*task {
	for t := sess.pop(0); t != nil; t = sess.pop(0) {
		sh.queued[t.prio]--
		t.job.settle(ErrDiscarded, outcomeDiscarded)
		sh.count(t)
		dropped = append(dropped, t)
	}
	sess.highRun = 0
	return dropped
}

// succeed makes a successor for old, a closing session, for Open: a fresh
// session that takes old's place in the map, held back until old is
// forgotten (release), so that tasks of one key still never overlap.
// Called with sh.mu held.
func (sh *shard[K]) succeed(s *Scheduler[K], old *session[K]) *session[K] {
	sess := sh.make(s, old.key) // replaces old in the map
	sess.pred, old.succ, sess.lanes.pred = old, sess, &old.lanes
	sh.setRest(sess, restPinned)
	sh.detached++ // old runs on out of the map
	return sess
}

// forget takes sess out of the map (if it is still there) and off the
// record list, and marks it gone for its handles. Called with sh.mu held.
func (sh *shard[K]) forget(sess *session[K]) {
	sh.setRest(sess, restNone)
	if sh.listed(sess) {
		sh.unlist(sess)
	}
	if sh.sessions[sess.key] == sess {
		delete(sh.sessions, sess.key)
	} else {
		sh.detached-- // a successor took its place
	}
	sess.gone, sess.handles = true, 0
}

// retire ends sess's activity: its worker found its queues empty. A
// closing session is forgotten, and its successor, if any, released: one
// with work becomes r.then, which the worker goes on with (it keeps its
// live token and slot); one without is pinned, or forgotten if it is
// closing too (and then its own successor is released, and so on). Any
// other session stays in the map, pinned if it has handles, else as an
// idle record (see keepIdle). What the caller must do once sh.mu is
// released goes into r: recycle the sessions forgotten and end the drains
// ended (after resolving the futures it still holds, so that a Remove that
// returns finds every future resolved; see finish). Called with sh.mu held.
func (s *Scheduler[K]) retire(sh *shard[K], sess *session[K], r *retirement[K]) {
	sess.scheduled, sess.highRun, sess.cur = false, 0, nil
	if sess.closing == nil {
		if sess.handles > 0 {
			sh.setRest(sess, restPinned)
		} else if f := sh.keepIdle(sess, s.idleCap); f != nil {
			r.forgotten = append(r.forgotten, f)
		}
		return
	}
	for sess != nil {
		sh.forget(sess)
		r.forgotten = append(r.forgotten, sess)
		if d := sess.closing.settle(); d != nil {
			r.ended = append(r.ended, d)
		}
		succ := sess.succ
		if succ == nil {
			return
		}
		sess.succ, succ.pred, succ.lanes.pred = nil, nil, nil
		if err := sess.closing.err; err != nil && succ.closing != nil && succ.closing.err == nil {
			succ.closing.err = err // what was cut short for the key is cut short for its successor's drain
		}
		switch {
		case succ.len() > 0:
			succ.scheduled = true
			r.then, r.successor = succ, true
			return
		case succ.closing == nil: // pinned by its handles already
			return
		}
		sess = succ
	}
}

// retirement is what retire leaves to do with no lock held.
type retirement[K comparable] struct {
	then      *session[K]   // a session the worker goes on with
	successor bool          // then is a released successor with work, which goes on with the key's turn
	forgotten []*session[K] // to recycle
	ended     []*drain      // to end
}

// finish ends the drains r ended and recycles the sessions it forgot; then
// stays. Called with no lock held, after the futures the caller holds are
// resolved.
func (s *Scheduler[K]) finish(r *retirement[K]) {
	if len(r.ended) == 0 && len(r.forgotten) == 0 {
		return // the common case: a task done, the session goes on
	}
	for _, d := range r.ended {
		d.end()
	}
	for _, f := range r.forgotten {
		s.recycle(f)
	}
	clear(r.forgotten)
	r.forgotten, r.ended = r.forgotten[:0], r.ended[:0]
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

func (r *retirement[K]) reset() {
	clear(r.forgotten)
	clear(r.ended)
	r.then, r.successor, r.forgotten, r.ended = nil, false, r.forgotten[:0], r.ended[:0]
}

// The shard's record list and what a session counts as while it has no
// worker (rest): the end of the retire path for a session that stays.

// keepIdle keeps sess, which has no work and no handles, as an idle record,
// so that its key's next task finds it without a map insert and delete,
// and without a trip through the pool. When idleCap records are kept
// already, sess is mostly forgotten instead, and every evictEvery-th time
// the oldest record is (see evictOldest). It returns the session it forgot,
// if any, for the caller to recycle once sh.mu is released. Called with
// sh.mu held.
func (sh *shard[K]) keepIdle(sess *session[K], idleCap int) (forgotten *session[K]) {
	if sh.nidle >= idleCap {
		// Full. Mostly forget sess itself, which is in cache, rather than
		// the oldest record, which is not: keys that cycle through more
		// sessions than the list holds then cost what they did without
		// one. Every evictEvery-th time the oldest goes instead, so that
		// records of keys that never return age out.
		if sh.evictTick++; sh.evictTick%evictEvery != 0 {
			sh.forget(sess)
			return sess
		}
		if forgotten = sh.evictOldest(sess); forgotten != nil {
			sh.forget(forgotten)
		}
	}
	sh.listIdle(sess)
	return forgotten
}

// listIdle makes sess an idle record. Called with sh.mu held.
func (sh *shard[K]) listIdle(sess *session[K]) {
	if !sh.listed(sess) {
		sh.list(sess)
	}
	sh.setRest(sess, restRecord)
}

// rest is what a session without a worker is counted as.
type rest uint8

const (
	restNone   rest = iota // active, held back with work, or forgotten
	restRecord             // an idle record: counted in nidle, on the record list
	restPinned             // idle and held by handles, or held back without work: counted in pinnedIdle
)

// setRest moves sess to r, keeping nidle and pinnedIdle. A record that
// becomes active stays on the list, marked reused: taking it off would
// touch its neighbours, which are other sessions' cache lines. Called with
// sh.mu held.
func (sh *shard[K]) setRest(sess *session[K], r rest) {
	switch sess.rest {
	case restRecord:
		sh.nidle--
		sess.reused = true
	case restPinned:
		sh.pinnedIdle--
	}
	switch r {
	case restRecord:
		sh.nidle++
	case restPinned:
		sh.pinnedIdle++
	}
	sess.rest = r
}

// evictEvery: see keepIdle.
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
		case t == sess || t.rest != restRecord:
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

// pin makes sess, idle or new, held by a handle. Called with sh.mu held.
func (sh *shard[K]) pin(sess *session[K]) {
	if sh.listed(sess) {
		sh.unlist(sess) // Open is rare: it may touch the neighbours
	}
	sh.setRest(sess, restPinned)
}
