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
