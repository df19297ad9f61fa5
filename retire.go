package seqsched

// How a session retires: its worker found its queues empty (worker.go's
// advance calls retire under the shard lock, then finish after it); a
// session that had no worker yet retires the same way when Discard empties
// it in the ready queue (slots.go's retireQueued) or a forced Shutdown
// does (end.go's abort). A
// closing session is forgotten and its drain settled, and a successor it
// held back is released; any other stays, pinned by its handles or as an
// idle record, counted by what it rests as (setRest). The states are on
// type session (session.go).

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
