package seqsched

import "runtime"

// runQueue is where a session with work waits for a goroutine, and how a
// goroutine moves on from one session to the next. New chooses one of two:
// without a limit, startQueues (below): a session that gets work gets a
// goroutine of its own, unless a goroutine is at work on its shard already,
// when it waits in the shard's start queue; under WithMaxConcurrency,
// slots (slots.go): a session runs only with a slot, and waits for one in
// one FIFO ready queue. Every method but moveOn and those of loans is
// called with the session's shard lock held.
type runQueue[K comparable] interface {
	// schedule makes sess, with work and no goroutine, runnable: running,
	// with a goroutine the caller starts once the lock is released
	// (start), or ready.
	schedule(sh *shard[K], sess *session[K]) (start bool)
	// spawn moves sess to running for a goroutine the caller starts once
	// the lock is released.
	spawn(sh *shard[K], sess *session[K])
	// unqueue takes ready sess out of its queue (Discard, the give-up) and
	// reports whether it was there: one that a goroutine just took off to
	// run is not.
	unqueue(sh *shard[K], sess *session[K]) bool
	// replace puts succ in ready old's place in its queue, and reports
	// whether old was there.
	replace(sh *shard[K], old, succ *session[K]) bool
	// handsOver reports whether the goroutine of pred, which retired, may
	// go on with pred's successor.
	handsOver(pred *session[K]) bool
	// yield ends the turn of sess, which has work left, and returns the
	// session the goroutine goes on with: sess when nobody waits, another,
	// or nil for the goroutine to exit.
	yield(sh *shard[K], sess *session[K]) *session[K]
	// leave lets go of sess, parked, paced or retired: it returns the
	// session the goroutine goes on with at once, if any, and whether the
	// goroutine holds a slot to pass on (moveOn).
	leave(sh *shard[K], sess *session[K]) (next *session[K], slot bool)
	// moveOn is the rest of yield or leave, once the lock is released: it
	// returns the session the goroutine goes on with, next or another.
	moveOn(next *session[K], yielded, slot bool) *session[K]
	// giveUp is the scheduler's give-up: nothing waits for a slot from
	// now on.
	giveUp()
	loans
}

// loans is the part of a run queue that a wait needs without the key type:
// the slot of its caller's session, lent while it waits (see slots.go), and
// the user code that may lend it. Without a limit there is nothing to lend.
type loans interface {
	// lendSlot lends b's slot for a wait of b's task or callback; it returns
	// the epoch to pass to reclaimSlot, and false when there is nothing to
	// take back.
	lendSlot(b *base) (epoch uint64, ok bool)
	// reclaimSlot takes the slot back when the wait ends.
	reclaimSlot(b *base, epoch uint64)
	// userBegin and userDone bracket the user code of b's worker that may
	// lend its slot; userDone ends a loan it made.
	userBegin(b *base)
	userDone(b *base)
}

// The run queue's calls on every task's path (schedule in accept, leave
// in advance, userBegin and userDone around fn) go to startQueues directly
// when there is no limit: a call through s.rq costs an interface call and
// a generic wrapper, about 30 instructions a round trip in all
// (docs/perf-log.md).

// userBegin marks user code that may lend sess's slot as running.
func (s *Scheduler[K]) userBegin(sess *session[K], u user) {
	sess.w.user = u
	if s.opts.maxConcurrency > 0 {
		s.rq.userBegin(&sess.base)
	}
}

// userDone ends what userBegin began.
func (s *Scheduler[K]) userDone(sess *session[K]) {
	if s.opts.maxConcurrency > 0 {
		s.rq.userDone(&sess.base)
	}
}

// startQueues is the run queue without a limit: each shard's start queue
// (shard.pending), its goroutines (shard.workers) and its starter.
type startQueues[K comparable] struct{ s *Scheduler[K] }

func (q startQueues[K]) schedule(sh *shard[K], sess *session[K]) (start bool) {
	s := q.s
	if sh.workers == 0 { // spawn, written out: this frame is on a wake-up's stack
		sh.workers++
		s.fire(sh, sess, evSpawn)
		return true
	}
	s.fire(sh, sess, evQueue)
	sh.pending.pushBack(sess)
	if !sh.starterOnWay {
		sh.starterOnWay = true
		s.addTokens(sh, 1) // the starter's
		go sh.starter()
	}
	return false
}

func (q startQueues[K]) spawn(sh *shard[K], sess *session[K]) {
	sh.workers++
	q.s.fire(sh, sess, evSpawn)
}

func (startQueues[K]) unqueue(sh *shard[K], sess *session[K]) bool {
	sh.pending.remove(sess) // taken off only under sh.mu, by startNext and startFrom
	return true
}

func (startQueues[K]) replace(sh *shard[K], old, succ *session[K]) bool {
	sh.pending.replace(old, succ)
	return true
}

func (startQueues[K]) handsOver(*session[K]) bool { return true }

func (startQueues[K]) yield(_ *shard[K], sess *session[K]) *session[K] { return sess }

// leave goes on with the oldest session of the start queue, if any (see
// startNext).
func (q startQueues[K]) leave(sh *shard[K], _ *session[K]) (*session[K], bool) {
	return q.startNext(sh), false
}

// moveOn gives the P away at the end of a turn while other goroutines
// of the scheduler live: the turn's end is when waiting sessions run.
func (q startQueues[K]) moveOn(next *session[K], yielded, _ bool) *session[K] {
	if yielded && q.s.tokens() > 1 {
		q.s.yields.Add(1)
		runtime.Gosched()
	}
	return next
}

func (startQueues[K]) giveUp()                       {}
func (startQueues[K]) lendSlot(*base) (uint64, bool) { return 0, false }
func (startQueues[K]) reclaimSlot(*base, uint64)     {}
func (startQueues[K]) userBegin(*base)               {}
func (startQueues[K]) userDone(*base)                {}

// startNext is what a goroutine of sh does when it lets go of its
// session: it goes on with the oldest session of the start queue, if any,
// or it stops counting as sh's worker.
// The common case, nobody waiting, is inlined; handOverNext is the rest.
func (q startQueues[K]) startNext(sh *shard[K]) *session[K] {
	if sh.pending.head == nil {
		sh.workers--
		return nil
	}
	return q.handOverNext(sh)
}

// handOverNext takes the oldest session of sh's start queue off it, and
// hands it to the calling goroutine.
func (q startQueues[K]) handOverNext(sh *shard[K]) *session[K] {
	next := sh.pending.head
	sh.pending.remove(next)
	q.s.fire(sh, next, evHandOver)
	return next
}

// startFrom is a starter's body (shard.starter): it takes the oldest
// session of sh's start queue and runs it, after starting the next starter
// if more wait, since the session it runs may block in a task for ever.
// No user code runs before work's guard.
func (q startQueues[K]) startFrom(sh *shard[K]) {
	s := q.s
	sh.mu.Lock()
	sess := sh.pending.head
	if sess == nil {
		sh.starterOnWay = false
		sh.mu.Unlock()
		s.addTokens(sh, -1) // the starter's
		return
	}
	sh.pending.remove(sess)
	sh.workers++
	s.fire(sh, sess, evHandOver) // the starter's token serves it
	if sh.starterOnWay = sh.pending.head != nil; sh.starterOnWay {
		s.addTokens(sh, 1)
		go sh.starter()
	}
	s.unlock(sh)
	s.work(sess)
}
