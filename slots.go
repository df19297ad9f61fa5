package seqsched

import "sync"

// slots is the run queue under a concurrency limit (WithMaxConcurrency):
// how many slots are held, the FIFO ready queue of sessions waiting for
// one, and the resumers, waits that lent their slot and now want one back.
// A freed slot goes first to the oldest resumer, then to the ready queue's
// head; only then is it counted free. Its methods are runQueue's (see
// there); the loans of a waiting task's slot are over the untyped base
// alone: only the ready queue knows the key type.
type slots[K comparable] struct {
	s        *Scheduler[K]
	mu       sync.Mutex
	max      int
	used     int
	ready    sessionList[K] // sessions waiting for a slot, oldest first
	resumers []*resumer
	gaveUp   bool // the scheduler gave up: the limit is lifted, nothing waits for a slot
}

// loan is the state of the slot a session's task (or callback) lends while
// it waits in Await, Remove, Discard, Close or Shutdown, guarded by
// slots.mu. Waits on several goroutines share one loan: the slot is lent
// by the first and taken back by the last. The worker ends the loan
// (settle) as soon as the user code that lent it returns; waits still in
// progress then take nothing back.
type loan struct {
	waits int      // waits in progress
	lent  bool     // the slot is lent
	epoch uint64   // bumped by settle: a wait of an older epoch reclaims nothing
	back  *resumer // the last wait's queued take-back, if any
}

// resumer is a wait of b's that wants its slot back; granted is closed
// when it has one (ok, with the loan ended and the slot b's worker's
// again), or when a new wait keeps the slot lent instead (ok false).
type resumer struct {
	granted chan struct{}
	ok      bool
	b       *base
}

// grant gives r the slot being passed on: the loan ends here, under
// slots.mu, so that a wait that begins before r's goroutine wakes finds
// the slot its worker's and lends it anew. Called with slots.mu held.
func (r *resumer) grant() {
	l := &r.b.loan
	if l.back == r {
		l.back = nil
	}
	l.lent, r.b.slot = false, true
	r.ok = true
	close(r.granted)
}

// schedule gives sess a slot, or queues it in the ready queue. Called
// under sess's shard lock (shard, then slots), so sessions queue in the
// order their first task was accepted.
func (q *slots[K]) schedule(sh *shard[K], sess *session[K]) (start bool) {
	q.mu.Lock()
	if q.used < q.max || q.gaveUp {
		q.used++
		sess.slot = true
		q.mu.Unlock()
		q.spawn(sh, sess)
		return true
	}
	q.ready.pushBack(sess)
	q.mu.Unlock()
	q.s.fire(sh, sess, evQueue)
	return false
}

func (q *slots[K]) spawn(sh *shard[K], sess *session[K]) { q.s.fire(sh, sess, evSpawn) }

func (q *slots[K]) unqueue(_ *shard[K], sess *session[K]) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.ready.contains(sess) {
		return false
	}
	q.ready.remove(sess)
	return true
}

func (q *slots[K]) replace(_ *shard[K], old, succ *session[K]) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.ready.contains(old) {
		return false
	}
	q.ready.replace(old, succ)
	return true
}

// handsOver: a pred that ran without a slot (after the give-up lifted the
// limit) has none to give its successor.
func (q *slots[K]) handsOver(pred *session[K]) bool { return pred.slot }

// handOn passes on a slot its holder gives up: to the oldest resumer, else
// to the ready queue's head, which it returns for the caller to run (the
// caller's goroutine, or one it starts); with neither the slot is freed.
// Called with slots.mu held.
func (q *slots[K]) handOn() *session[K] {
	if len(q.resumers) > 0 {
		r := q.resumers[0]
		q.resumers[0] = nil
		q.resumers = q.resumers[1:]
		r.grant()
		return nil
	}
	if head := q.ready.head; head != nil {
		q.ready.remove(head)
		head.slot, head.w.handed = true, evHandOver
		return head
	}
	q.used--
	return nil
}

// yield: if a resumer or a session waits, sess goes to the back of the
// ready queue and the slot passes on (nil: a resumer took it, and the
// goroutine exits); else sess goes on.
func (q *slots[K]) yield(sh *shard[K], sess *session[K]) *session[K] {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gaveUp || (len(q.resumers) == 0 && q.ready.head == nil) {
		return sess
	}
	sess.slot = false
	q.s.fire(sh, sess, evYield)
	q.ready.pushBack(sess)
	next := q.handOn()
	q.s.yields.Add(1)
	return next
}

// leave reads and clears sess's slot under the shard lock: once let go,
// the session may be scheduled again, and its slot set, by others.
func (q *slots[K]) leave(_ *shard[K], sess *session[K]) (*session[K], bool) {
	slot := sess.slot
	sess.slot = false
	return nil, slot
}

// moveOn passes on the slot of a goroutine that let go of its session,
// and goes on with the session it went to, if any (see handOn).
func (q *slots[K]) moveOn(next *session[K], _, slot bool) *session[K] {
	if !slot {
		return next
	}
	q.mu.Lock()
	next = q.handOn()
	q.mu.Unlock()
	return next
}

// giveUp lifts the limit: resumers get their slot at once, and nothing
// waits for one from now on.
func (q *slots[K]) giveUp() {
	q.mu.Lock()
	q.gaveUp = true
	for _, r := range q.resumers {
		r.grant()
	}
	q.resumers = nil
	q.mu.Unlock()
}

// lendSlot gives away the slot of b's worker while a task or callback of b
// waits (see loan): to a resumer, else to the ready queue's head on a new
// goroutine, else back to the pool.
func (q *slots[K]) lendSlot(b *base) (uint64, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := &b.loan
	b.lending.Store(true) // before open is read: see userDone
	if !b.open.Load() || (!b.slot && !l.lent) {
		return 0, false
	}
	l.waits++
	switch {
	case l.waits > 1:
		// Another wait lent it already.
	case l.back != nil:
		// The last wait waits to take the slot back: keep it lent for this one.
		q.cancelBack(l)
	case !l.lent:
		l.lent, b.slot = true, false
		if head := q.handOn(); head != nil {
			head.w.handed = evSpawn // head's live token passes to its goroutine
			go head.start()
		}
	}
	return l.epoch, true
}

// reclaimSlot takes the slot back when the last wait of a loan ends, ahead of
// sessions that have not started: at once if one is free, else as a
// resumer, waiting until a slot is passed to it.
func (q *slots[K]) reclaimSlot(b *base, epoch uint64) {
	q.mu.Lock()
	l := &b.loan
	if l.epoch != epoch {
		q.mu.Unlock()
		return
	}
	if l.waits--; l.waits > 0 || !l.lent {
		q.mu.Unlock()
		return
	}
	q.regainLocked(b)
}

// userBegin marks user code that may lend b's slot as running.
func (q *slots[K]) userBegin(b *base) { b.open.Store(true) }

// userDone ends what userBegin began: a loan that a wait made meanwhile
// ends, and the worker takes its slot back before it goes on. A wait that
// set lending before it read open is seen here, and one that read open
// after it was cleared lends nothing (see lendSlot).
func (q *slots[K]) userDone(b *base) {
	b.open.Store(false)
	if b.lending.Load() {
		q.settle(b)
	}
}

// settle ends b's loan when the user code that lent the slot returned:
// the worker takes a slot back itself before it runs anything else, and
// waits still in progress take nothing back.
func (q *slots[K]) settle(b *base) {
	q.mu.Lock()
	l := &b.loan
	b.lending.Store(false)
	l.epoch++
	l.waits = 0
	if !l.lent {
		q.mu.Unlock()
		return
	}
	if l.back != nil {
		q.cancelBack(l)
	}
	q.regainLocked(b)
}

// regainLocked gives b's worker a slot back: at once if one is free, else
// as the newest resumer. Called with slots.mu held; returns with it
// released.
func (q *slots[K]) regainLocked(b *base) {
	l := &b.loan
	if (q.used < q.max && len(q.resumers) == 0) || q.gaveUp {
		q.used++
		l.lent, b.slot = false, true
		q.mu.Unlock()
		return
	}
	r := &resumer{granted: make(chan struct{}), b: b}
	l.back = r
	q.resumers = append(q.resumers, r)
	q.mu.Unlock()
	<-r.granted // grant or cancelBack has settled the loan
}

// cancelBack withdraws l's queued take-back: the wait in it returns
// without a slot, which stays lent. Called with slots.mu held.
func (q *slots[K]) cancelBack(l *loan) {
	back := l.back
	for i, r := range q.resumers {
		if r == back {
			q.resumers = append(q.resumers[:i], q.resumers[i+1:]...)
			break
		}
	}
	close(back.granted)
	l.back = nil
}
