package seqsched

import "sync"

// slots is the concurrency limit (WithMaxConcurrency): how many slots are
// held, the FIFO ready queue of sessions waiting for one, and the resumers,
// waits that lent their slot and now want one back. A freed slot goes
// first to the oldest resumer, then to the ready queue's head; only then
// is it counted free. Without a limit, slots is unused: every session that
// gets work gets a goroutine at once.
type slots[K comparable] struct {
	mu        sync.Mutex
	max       int
	used      int
	ready     sessionList[K] // sessions waiting for a slot, oldest first
	resumers  []*resumer[K]
	unlimited bool // a forced Shutdown lifted the limit: nothing waits for a slot
}

// loan is the state of the slot a session's task (or callback) lends while
// it waits in Await, Remove, Discard, Close or Shutdown, guarded by
// slots.mu. Waits on several goroutines share one loan: the slot is lent
// by the first and taken back by the last. The worker ends the loan
// (settle) as soon as the user code that lent it returns; waits still in
// progress then take nothing back.
type loan struct {
	waits int    // waits in progress
	lent  bool   // the slot is lent
	epoch uint64 // bumped by settle: a wait of an older epoch reclaims nothing
	back  any    // the last wait's queued take-back (a *resumer[K]), if any
}

// resumer is a wait of sess's that wants its slot back; granted is closed
// when it has one (ok, with the loan ended and the slot sess's worker's
// again), or when a new wait keeps the slot lent instead (ok false).
type resumer[K comparable] struct {
	granted chan struct{}
	ok      bool
	sess    *session[K]
}

// grant gives r the slot being passed on: the loan ends here, under
// slots.mu, so that a wait that begins before r's goroutine wakes finds
// the slot its worker's and lends it anew. Called with slots.mu held.
func (r *resumer[K]) grant() {
	l := &r.sess.base.loan
	if l.back == r {
		l.back = nil
	}
	l.lent, r.sess.w.slot = false, true
	r.ok = true
	close(r.granted)
}

// claimSlot gives sess a slot, or queues it in the ready queue; it reports
// whether sess got one. Called under sess's shard lock (shard, then
// slots), so sessions queue in the order their first task was accepted.
func (s *Scheduler[K]) claimSlot(sess *session[K]) bool {
	q := &s.slots
	if q.max == 0 {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.used < q.max || q.unlimited {
		q.used++
		sess.w.slot = true
		return true
	}
	q.ready.pushBack(sess)
	return false
}

// unqueue takes sess out of the ready queue, or without a limit out of its
// shard's start queue (Discard, a forced Shutdown), and reports whether it
// was there: a session just popped by a goroutine that is about to claim
// it is not. Called with sh.mu held.
func (s *Scheduler[K]) unqueue(sh *shard[K], sess *session[K]) bool {
	if s.slots.max == 0 {
		sh.pending.remove(sess) // taken off only under sh.mu, by startNext and startFrom
		return true
	}
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	if !s.slots.ready.contains(sess) {
		return false
	}
	s.slots.ready.remove(sess)
	return true
}

// replaceReady puts succ in old's place in the ready queue (or its shard's
// start queue) and reports whether old was there. Called with sh.mu held.
func (s *Scheduler[K]) replaceReady(sh *shard[K], old, succ *session[K]) bool {
	if s.slots.max == 0 {
		sh.pending.replace(old, succ)
		return true
	}
	q := &s.slots
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.ready.contains(old) {
		return false
	}
	q.ready.replace(old, succ)
	return true
}

// handOn passes on a slot its holder gives up: to the oldest resumer, else
// to the ready queue's head, which it returns for the caller to run (its
// live token and the slot pass to the caller's goroutine); with neither
// the slot is freed. Called with slots.mu held.
func (s *Scheduler[K]) handOn() *session[K] {
	q := &s.slots
	if len(q.resumers) > 0 {
		r := q.resumers[0]
		q.resumers[0] = nil
		q.resumers = q.resumers[1:]
		r.grant()
		return nil
	}
	if head := q.ready.head; head != nil {
		q.ready.remove(head)
		head.w.slot, head.w.handed = true, evHandOver
		return head
	}
	q.used--
	return nil
}

// passSlot hands the slot of a goroutine whose session retired on, and
// returns the session it is to run next, if any (see handOn).
func (s *Scheduler[K]) passSlot() *session[K] {
	s.slots.mu.Lock()
	next := s.handOn()
	s.slots.mu.Unlock()
	return next
}

// yieldSlot ends sess's turn under a limit: if a resumer or a session
// waits, sess goes to the back of the ready queue and the slot passes on;
// it returns the session the calling goroutine runs next (sess itself
// when nobody waits; nil when a resumer took the slot and the goroutine
// must exit). Called with sess's shard lock held, as the state moves.
func (s *Scheduler[K]) yieldSlot(sh *shard[K], sess *session[K]) *session[K] {
	q := &s.slots
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.unlimited || (len(q.resumers) == 0 && q.ready.head == nil) {
		return sess
	}
	sess.w.slot = false
	s.fire(sh, sess, evYield)
	q.ready.pushBack(sess)
	next := s.handOn()
	s.yields.Add(1)
	return next
}

// lend gives away the slot of sess's worker while a task or callback of
// sess waits (see loan): to a resumer, else to the ready queue's head on a
// new goroutine, else back to the pool. It returns the epoch to pass to
// reclaim, and false when there is nothing to take back.
func (s *Scheduler[K]) lend(sess *session[K]) (uint64, bool) {
	q := &s.slots
	q.mu.Lock()
	defer q.mu.Unlock()
	l := &sess.base.loan
	sess.base.lending.Store(true) // before open is read: see worker.userDone
	if !sess.base.open.Load() || (!sess.w.slot && !l.lent) {
		return 0, false
	}
	l.waits++
	switch {
	case l.waits > 1:
		// Another wait lent it already.
	case l.back != nil:
		// The last wait waits to take the slot back: keep it lent for this one.
		s.cancelBack(l)
	case !l.lent:
		l.lent, sess.w.slot = true, false
		if head := s.handOn(); head != nil {
			head.w.handed = evSpawn // head's live token passes to its goroutine
			go head.start()
		}
	}
	return l.epoch, true
}

// reclaim takes the slot back when the last wait of a loan ends, ahead of
// sessions that have not started: at once if one is free, else as a
// resumer, waiting until a slot is passed to it.
func (s *Scheduler[K]) reclaim(sess *session[K], epoch uint64) {
	q := &s.slots
	q.mu.Lock()
	l := &sess.base.loan
	if l.epoch != epoch {
		q.mu.Unlock()
		return
	}
	if l.waits--; l.waits > 0 || !l.lent {
		q.mu.Unlock()
		return
	}
	s.regainLocked(sess)
}

// settle ends sess's loan when the user code that lent the slot returned:
// the worker takes a slot back itself before it runs anything else, and
// waits still in progress take nothing back.
func (s *Scheduler[K]) settle(sess *session[K]) {
	q := &s.slots
	q.mu.Lock()
	l := &sess.base.loan
	sess.base.lending.Store(false)
	l.epoch++
	l.waits = 0
	if !l.lent {
		q.mu.Unlock()
		return
	}
	if l.back != nil {
		s.cancelBack(l)
	}
	s.regainLocked(sess)
}

// regainLocked gives sess's worker a slot back: at once if one is free,
// else as the newest resumer. Called with slots.mu held; returns with it
// released.
func (s *Scheduler[K]) regainLocked(sess *session[K]) {
	q := &s.slots
	l := &sess.base.loan
	if (q.used < q.max && len(q.resumers) == 0) || q.unlimited {
		q.used++
		l.lent, sess.w.slot = false, true
		q.mu.Unlock()
		return
	}
	r := &resumer[K]{granted: make(chan struct{}), sess: sess}
	l.back = r
	q.resumers = append(q.resumers, r)
	q.mu.Unlock()
	<-r.granted // grant or cancelBack has settled the loan
}

// cancelBack withdraws l's queued take-back: the wait in it returns
// without a slot, which stays lent. Called with slots.mu held.
func (s *Scheduler[K]) cancelBack(l *loan) {
	q := &s.slots
	back := l.back.(*resumer[K])
	for i, r := range q.resumers {
		if r == back {
			q.resumers = append(q.resumers[:i], q.resumers[i+1:]...)
			break
		}
	}
	close(back.granted)
	l.back = nil
}

// unlimit lifts the limit for a forced Shutdown: resumers get their slot
// at once, and nothing waits for one from now on.
func (s *Scheduler[K]) unlimit() {
	q := &s.slots
	q.mu.Lock()
	q.unlimited = true
	for _, r := range q.resumers {
		r.grant()
	}
	q.resumers = nil
	q.mu.Unlock()
}
