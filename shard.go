package seqsched

import (
	"hash/maphash"
)

// shard is one lock's worth of sessions, with its idle records and its
// start queue. Keys are spread over shards by hash so that producers and
// sessions on different cores rarely contend.
type shard[K comparable] struct {
	mu       mutex
	sessions map[K]*session[K]
	queued   [2]int // tasks waiting in this shard's sessions, by priority
	running  int    // sessions of this shard executing a task
	counts   [2]outcomes
	// submitted and skipped over both priorities (see Stats).
	submitted uint64
	// Idle records: sessions with no work, kept in sessions for reuse (see
	// keepIdle). The record list holds every idle record, newest listed
	// first, and may hold sessions that became active again since they
	// were listed: they are not taken off it, so that reusing a record
	// touches no other session. nidle counts the idle records.
	idleHead, idleTail *session[K]
	nidle              int
	pinnedIdle         int  // idle sessions held by handles (not records)
	detached           int  // closing sessions running on after a successor took their place in sessions
	evictTick          uint // retirements that found the records full
	// Without WithMaxConcurrency: sessions activated while a worker was
	// already at work on this shard wait in the start queue (pending)
	// instead of each getting a new goroutine. A worker whose session goes
	// idle takes the oldest; a starter (a worker at stepStarter) makes sure
	// one is taken even while every worker is busy in a task. workers
	// counts the goroutines running this shard's sessions; starterOnWay is
	// set while a starter is on its way.
	pending      sessionFIFO[K]
	workers      int
	starterOnWay bool
	starterFn    func() // runs a starter for this shard (Scheduler.runStarter); made once
	_            [64]byte
}

// count adds t, whose outcome is known, to the shard's figures. Called with
// sh.mu held.
func (sh *shard[K]) count(t *task) {
	sh.counts[t.prio].add(t.outcome)
}

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

// pin makes sess, idle or new, held by a handle. Called with sh.mu held.
func (sh *shard[K]) pin(sess *session[K]) {
	if sh.listed(sess) {
		sh.unlist(sess) // Open is rare: it may touch the neighbours
	}
	sh.setRest(sess, restPinned)
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
