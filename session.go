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
// The operations: in this file make, open and unhold (a handle), wake
// and activate (a task for a session without a goroutine: schedule it),
// close (begin closing), discard, succeed and holdBack (a successor); in
// retire.go retire (its worker found its queues empty; it releases a
// successor), forget, finish and recycle, and what an idle session is
// counted as: keepIdle, listIdle, evictOldest, pin and setRest. The record
// list's own links are shard.go's list and unlist; a session's queues,
// enqueue and pickNext, are in lanes.go; a drain is end.go's.
//
// How a session retires, for a reader (retire.go, then worker.go's
// advance and idle): its worker's advance finds its queues empty and
// calls retire under the shard lock; retire forgets a closing session
// (forget; its drain's settle), or keeps it pinned (setRest) or as an idle
// record (keepIdle, evictOldest); finish, after the lock, ends the drains
// and recycles what was forgotten; the worker then goes on (idle) with a
// released successor, the start queue's oldest, or a slot's next session.
// Remove, Discard and Close begin it with close (end.go waits for the
// drain); a forced Shutdown cuts it short in abort.
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

// open makes or finds key's session for a new handle, and counts the
// handle (Open): a new session or an idle record becomes pinned, and a
// closing one gets a successor, held back behind it. Called with sh.mu
// held.
func (sh *shard[K]) open(s *Scheduler[K], key K) *session[K] {
	sess := sh.sessions[key]
	switch {
	case sess == nil:
		sess = sh.make(s, key)
		sh.pin(sess)
	case sess.closing != nil:
		sess = sh.succeed(s, sess)
	case sess.rest == restRecord:
		sh.pin(sess)
	}
	sess.handles++
	sess.handled = true
	return sess
}

// unhold lets go of one of sess's handles and reports whether it was the
// last (Close: the session then drains). Called with sh.mu held.
func (sh *shard[K]) unhold(sess *session[K]) (last bool) {
	sess.handles--
	return sess.handles == 0
}

// wake makes sess, which has just been given a task, active: it stops
// counting as idle or pinned and, unless it is held back behind a
// predecessor, is scheduled (activate). Called with sh.mu held.
func (s *Scheduler[K]) wake(sh *shard[K], sess *session[K]) (start, starter bool) {
	if sess.scheduled {
		return false, false
	}
	sh.setRest(sess, restNone)
	if sess.pred != nil {
		return false, false
	}
	return s.activate(sh, sess)
}

// holdBack counts p, a successor whose queues were just emptied (Discard,
// a forced Shutdown), as pinned again: held back, with no work. Called
// with sh.mu held.
func (sh *shard[K]) holdBack(p *session[K]) {
	if p.pred != nil && p.rest == restNone {
		sh.setRest(p, restPinned)
	}
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
