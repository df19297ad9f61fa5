package seqsched

import (
	"hash/maphash"
	"sync"
)

// A shard is one lock's worth of sessions, with its idle records and its
// start queue. Keys are spread over shards by hash.

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
	// idle takes the oldest; a starter (see Scheduler.runStarter) makes sure one
	// is taken even while every worker is busy in a task. workers counts
	// the goroutines running this shard's sessions; starter is set while a
	// starter is on its way.
	pending      waiting[K]
	workers      int
	starterOnWay bool
	starterFn    func() // runs Scheduler.runStarter for this shard; made once, so `go starterFn()` allocates nothing
	_            [64]byte
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

// takeNext pops sess's next task, if any, and counts it running. Called with
// sh.mu held.
func (sh *shard[K]) takeNext(sess *session[K], burst int) *task {
	t := sess.pop(burst)
	if t != nil {
		sh.queued[t.prio]--
		sh.running++
	}
	return t
}

// runStarter is a starter: a goroutine started for sh's start queue. It takes
// the oldest waiting session and runs it; if more wait, it first starts
// the next starter, since the session it runs may block in a task for
// ever. A starter that finds the queue emptied by workers exits.
func (s *Scheduler[K]) runStarter(sh *shard[K]) {
	sh.mu.Lock()
	sess := sh.pending.pop()
	if sess == nil {
		sh.starterOnWay = false
		sh.mu.Unlock()
		s.release(1)
		return
	}
	sh.workers++
	sess.first = sh.takeNext(sess, s.opts.highBurst) // as Submit does for a goroutine it starts
	more := sh.pending.head != nil
	sh.starterOnWay = more
	if more {
		s.takeToken() // the next starter's, under the lock as in enqueue
	}
	sh.mu.Unlock()
	if more {
		go sh.starterFn()
	}
	s.work(sess, nil, nil)
}

// idleRecords is how many idle sessions a scheduler keeps for reuse, over
// all its shards: a key that comes back soon finds its record instead of
// making one. About 200 bytes each with a small key, so under 1 MiB in all.
const idleRecords = 4096

// shardCount is how many shards New makes for procs Ps: 16 per P, rounded
// up to a power of two, at most 256. Producers and the goroutines that retire
// sessions take shard locks about once per task, and with fewer shards they
// collide often enough to park each other: with 4 per P (8 shards on 2 cores)
// the lock's slow path and wake-ups were a fifth of the CPU profile at 100,000
// sessions, and 16 per P made that workload 11% faster; 32 per P gained
// nothing more.
func shardCount(procs int) int {
	n := 8
	for n < 16*procs && n < 256 {
		n *= 2
	}
	return n
}

func (s *Scheduler[K]) shard(key K) *shard[K] {
	return &s.shards[maphash.Comparable(s.seed, key)&s.mask]
}
