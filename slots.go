package seqsched

import (
	"runtime"
)

// slots is the concurrency limit (WithMaxConcurrency): how many slots are
// held, the FIFO of sessions waiting for one, and the tasks waiting to take
// theirs back after an Await. Every freed slot goes first to a resumer, then
// to the head of the ready queue; only then is it counted free.
type slots[K comparable] struct {
	mu       mutex
	running  int            // slots held by goroutines that may run a task now
	ready    sessionFIFO[K] // sessions waiting for a slot to start a turn, each with a live token
	resumers []*resumer     // tasks back from an Await, waiting for a slot
}

// queue puts sess, with the live token it holds, in the ready queue.
// Under checkTokens the token is counted as the queue's, not a worker's
// (see checks.go), so that a token lost while its session waits shows.
// Called with slots.mu held.
func (s *Scheduler[K]) queue(sess *session[K]) {
	s.slots.ready.push(sess)
	if checkTokens {
		s.slack.Add(-1)
	}
}

// unqueue takes the ready queue's head, if any, with its live token.
// Called with slots.mu held.
func (s *Scheduler[K]) unqueue() *session[K] {
	sess := s.slots.ready.pop()
	if checkTokens && sess != nil {
		s.slack.Add(1)
	}
	return sess
}

// resumer is a caller of a wait waiting to take its slot back; granted is
// closed when it has one.
type resumer struct {
	ls      *lentSlot
	granted chan struct{}
}

// sessionFIFO is a FIFO of sessions waiting for a goroutine, linked through
// session.link: the ready queue (slots) and a shard's start queue.
// A session is in at most one, and only one of the two is in use (with or
// without WithMaxConcurrency).
type sessionFIFO[K comparable] struct{ head, tail *session[K] }

func (q *sessionFIFO[K]) push(sess *session[K]) {
	sess.link = nil
	if q.tail == nil {
		q.head = sess
	} else {
		q.tail.link = sess
	}
	q.tail = sess
}

func (q *sessionFIFO[K]) pop() *session[K] {
	sess := q.head
	if sess == nil {
		return nil
	}
	q.head = sess.link
	if q.head == nil {
		q.tail = nil
	}
	sess.link = nil
	return sess
}

// grantResumer hands the caller's slot to the oldest resumer, if any.
// Called with mu held.
func (q *slots[K]) grantResumer() bool {
	if len(q.resumers) == 0 {
		return false
	}
	r := q.resumers[0]
	q.resumers[0] = nil
	q.resumers = q.resumers[1:]
	r.ls.lent, r.ls.back = false, nil
	close(r.granted)
	return true
}

// cancelBack takes ls's queued take-back out of the resumers without a
// slot: the Await waiting in it returns, and the slot stays lent. Called
// with mu held.
func (q *slots[K]) cancelBack(ls *lentSlot) {
	for i, r := range q.resumers {
		if r == ls.back {
			q.resumers = append(q.resumers[:i], q.resumers[i+1:]...)
			break
		}
	}
	close(ls.back.granted)
	ls.back = nil
}

// handOn passes on a slot its holder gives up: to the oldest resumer, else
// to the head of the ready queue, which it returns for the caller to run;
// with neither, the slot is freed. Called with mu held.
func (s *Scheduler[K]) handOn() *session[K] {
	if s.slots.grantResumer() {
		return nil
	}
	sess := s.unqueue()
	if sess == nil {
		s.slots.running--
	}
	return sess
}

// claimSlot gives sess, just marked scheduled by activate, a slot, or
// queues it for one; it reports whether the caller must start sess's
// worker. The live token activate took moves to the worker or stays with
// the waiting session.
//
// activate calls it under the session's shard lock (shard before slots is
// the lock order), so no other Submit to the session returns before the
// session is queued: sessions queue in the order their first task was
// accepted, and a session with accepted work is never left out of the
// queue while a preempted submitter gets round to queueing it.
func (s *Scheduler[K]) claimSlot(sess *session[K]) bool {
	if max := s.opts.maxConcurrency; max > 0 {
		s.slots.mu.Lock()
		// After a forced shutdown nobody serves the ready queue: start the
		// session anyway, it finds its queues emptied and retires.
		if s.slots.running >= max && !s.forced.Load() {
			s.queue(sess)
			s.slots.mu.Unlock()
			return false
		}
		s.slots.running++
		s.slots.mu.Unlock()
	}
	return true
}

// yield ends sess's turn and returns the session the calling worker goes
// on with. With a concurrency limit, if a task waits to take its slot
// back, the slot goes to it, sess goes to the back of the ready queue and
// the worker must exit (nil); else if a session waits, sess goes to the
// back and the head takes over this worker and slot. Without a limit, the
// goroutine yields the processor when the scheduler has another goroutine
// (sessions in a start queue count: their starter is one).
func (s *Scheduler[K]) yield(sess *session[K]) (next *session[K]) {
	if s.opts.maxConcurrency == 0 {
		if s.tokens() > 1 {
			s.yields.Add(1)
			runtime.Gosched()
		}
		return sess
	}
	next = sess
	s.slots.mu.Lock()
	if !s.forced.Load() {
		if s.slots.grantResumer() {
			// sess waits with a token of its own, taken before another
			// goroutine can pop it; the worker exits with its own.
			s.takeToken()
			s.queue(sess)
			next = nil
		} else if head := s.unqueue(); head != nil {
			s.queue(sess)
			next = head // head's live token passes to sess
		}
	}
	s.slots.mu.Unlock()
	if next != sess {
		s.yields.Add(1)
	}
	return next
}

// passSlot hands the calling worker's slot on once its session went idle:
// to a resumer (the worker then exits), or to the next waiting session,
// which it returns to run on this worker. Without either the slot is freed
// and passSlot returns nil.
func (s *Scheduler[K]) passSlot() *session[K] {
	if s.opts.maxConcurrency == 0 {
		return nil
	}
	s.slots.mu.Lock()
	sess := s.handOn()
	s.slots.mu.Unlock()
	if sess != nil {
		s.release(1) // its token merges into this worker's
	}
	return sess
}

// lend gives the slot of a waiting caller away while it waits (a task's
// Await, Remove, Close, Discard or Shutdown called with its ctx, or any of
// them called from a callback on a worker): to a resumer, else to a
// waiting session on a new worker, else back to the pool. The caller's
// session stays running for ordering: none of its other tasks starts. It
// reports whether the caller must call reclaim after the wait.
func (s *Scheduler[K]) lend(ls *lentSlot) bool {
	if s.opts.maxConcurrency == 0 {
		return false
	}
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	if ls.finished {
		return false
	}
	ls.awaiting++
	switch {
	case ls.awaiting > 1:
		// Another wait lent the slot already.
	case ls.back != nil:
		// A wait that ended waits to take the slot back: the caller is
		// waiting again, so the slot stays lent and that wait returns.
		s.slots.cancelBack(ls)
	case !ls.lent:
		ls.lent = true
		// After a forced Shutdown the head still starts: it finds its
		// queues emptied and retires, releasing its token.
		if head := s.handOn(); head != nil {
			s.startWorker(head) // head's live token moves to the worker
		}
	}
	return true
}

// reclaim takes the slot back after the wait that lend began, ahead of
// sessions that have not started their turn, when it ends the last wait in
// progress. It blocks until a slot is free: the caller must not run on
// without one. Only two things end that wait without a slot: another wait
// begins (the slot stays lent for it; see lend), or the task's fn returns
// (the worker takes the slot back itself; see settle).
func (s *Scheduler[K]) reclaim(ls *lentSlot) {
	s.slots.mu.Lock()
	ls.awaiting--
	if ls.awaiting > 0 || !ls.lent || ls.finished {
		s.slots.mu.Unlock()
		return
	}
	s.regainLocked(ls)
}

// settle runs on the worker after fn of a task returned, when the task
// ever lent its slot. A wait on another goroutine may still hold it lent;
// the worker takes a slot back itself before it runs anything else, and
// that wait returns without one.
func (s *Scheduler[K]) settle(ls *lentSlot) {
	s.slots.mu.Lock()
	ls.finished = true
	if !ls.lent {
		s.slots.mu.Unlock()
		return
	}
	if ls.back != nil {
		s.slots.cancelBack(ls)
	}
	s.regainLocked(ls)
}

// regainLocked gives the caller a slot, at once if one is free (or the
// scheduler was forced shut), else by queueing it as a resumer and
// waiting. It is called with mu held and returns with it released.
func (s *Scheduler[K]) regainLocked(ls *lentSlot) {
	if (s.slots.running < s.opts.maxConcurrency && len(s.slots.resumers) == 0) || s.forced.Load() {
		s.slots.running++
		ls.lent = false
		s.slots.mu.Unlock()
		return
	}
	r := &resumer{ls: ls, granted: make(chan struct{})}
	ls.back = r
	s.slots.resumers = append(s.slots.resumers, r)
	s.slots.mu.Unlock()
	<-r.granted
}

// retireQueued retires sess (see retire) if it waits in the ready queue,
// and reports whether it did. A successor that retire releases with work
// takes sess's place in the queue, with sess's live token: the key waited
// its turn already. Otherwise sess leaves the queue and its token is the
// caller's to give back. Called with sess's shard lock held (shard, then
// slots: the lock order), so that no worker pops sess meanwhile.
func (s *Scheduler[K]) retireQueued(sh *shard[K], sess *session[K], r *retirement[K]) bool {
	if s.opts.maxConcurrency == 0 {
		return false
	}
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	q := &s.slots.ready
	var prev *session[K]
	for p := q.head; p != nil; prev, p = p, p.link {
		if p != sess {
			continue
		}
		s.retire(sh, sess, r)
		next := sess.link
		if then := r.then; then != nil {
			then.link, next = next, then
		}
		if prev == nil {
			q.head = next
		} else {
			prev.link = next
		}
		if q.tail == sess {
			q.tail = prev
			if r.then != nil {
				q.tail = r.then
			}
		}
		sess.link = nil
		if checkTokens && r.then == nil {
			s.slack.Add(1) // sess's token left the queue with it
		}
		return true
	}
	return false
}

// abortSlots, for a forced Shutdown, empties the ready queue (returning the
// sessions that waited in it) and lets every resumer run.
func (s *Scheduler[K]) abortSlots() (waiting []*session[K]) {
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	for sess := s.unqueue(); sess != nil; sess = s.unqueue() {
		waiting = append(waiting, sess)
	}
	for len(s.slots.resumers) > 0 {
		s.slots.running++
		s.slots.grantResumer()
	}
	return waiting
}

// lentSlot is the slot state of a caller that lent its slot while it
// waited under a concurrency limit: a task (in its taskAux, shared by
// waits on any goroutine with its ctx) or a worker in a callback. Guarded
// by slots.mu.
type lentSlot struct {
	awaiting int32    // waits in progress that lent the slot
	lent     bool     // the slot is given away while the caller waits
	finished bool     // the task's fn returned: waits neither lend nor take back
	back     *resumer // the queued take-back of the slot, if one waits
}

// slotState returns t's lent-slot state, making it if need be.
func (t *task) slotState() *lentSlot {
	a := t.extra()
	if ls := a.lent.Load(); ls != nil {
		return ls
	}
	ls := new(lentSlot)
	if !a.lent.CompareAndSwap(nil, ls) {
		ls = a.lent.Load()
	}
	return ls
}

// limited reports whether s has a concurrency limit: only then is there a
// slot to lend.
func (s *Scheduler[K]) limited() bool { return s.opts.maxConcurrency > 0 }
