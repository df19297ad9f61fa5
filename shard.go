package seqsched

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// shard is one lock's worth of sessions and their figures. Keys are spread
// over shards by hash, so that producers and workers on different cores
// rarely contend.
//
// Idle records: a session whose queues empty, with no handles, stays in
// the map as an idle record, so that its key's next task finds it without
// a map insert and delete. The shard keeps at most idleCap of them in a
// list, most recently idle first, and forgets the oldest beyond that, so
// memory does not grow with the number of keys ever seen.
type shard[K comparable] struct {
	// live is a stripe of the live tokens (see Scheduler.afterSeal). A
	// worker reads every stripe at the end of each turn (tokens), so it
	// has a cache line of its own: on the lock's line, those reads pulled
	// the line away from the producer about to take the lock.
	live atomic.Int64
	_    [56]byte

	mu       sync.Mutex
	index    uint32 // its place in Scheduler.shards
	sessions map[K]*session[K]

	idle sessionList[K] // idle records, newest first, and sessions that got work since they were listed (see keepIdle)

	// Without WithMaxConcurrency: sessions that get work while a goroutine
	// is at work on this shard wait in pending, the start queue, instead
	// of each starting a goroutine. A goroutine whose session retires takes
	// the oldest (startNext); a starter makes sure one is taken even while
	// every goroutine is busy in a task (startFrom). workers counts the
	// goroutines running this shard's sessions; starterOnWay is set while a
	// starter is on its way.
	pending      sessionList[K]
	workers      int
	starterOnWay bool
	starter      func() // runs startFrom for this shard; made once

	runs []*session[K] // sessions whose worker has a run (see run.go), for Stats

	owed int // live tokens the moves of this lock section give back once it is released (see fire)

	busy      int    // sessions with queued or running work (see session.busy)
	paused    int    // sessions in statePaused
	paced     int    // sessions in statePaced
	halts     uint64 // sessions halted by a failed HaltOnError task
	waiters   int    // callers waiting for room (room.go), all sessions
	running   int    // sessions running a task right now
	queued    [2]int // tasks waiting, by priority
	submitted uint64
	counts    [2][nOutcomes]uint64 // tasks resolved, by priority and outcome

	_ [64]byte // keep shards' locks on separate cache lines
}

// idleRecords is how many idle sessions a scheduler keeps for reuse, over
// all its shards: a key that comes back soon finds its record instead of
// making one. About 300 bytes each with a small key, so about 1 MiB in all.
const idleRecords = 4096

// shardCount is how many shards New makes for procs Ps: 16 per P, rounded
// up to a power of two, at most 256. Producers and workers take a shard
// lock about twice per task; with fewer shards they collide often enough
// to park each other.
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

// makeSession creates key's session, idle and unlisted, in sh's map: a
// recycled record if there is one (see recycle), so that keys that come
// and go cost no allocation.
func (s *Scheduler[K]) makeSession(sh *shard[K], key K) *session[K] {
	sess, _ := s.records.Get().(*session[K])
	if sess == nil {
		sess = new(session[K])
		sess.core = &s.core
		sess.start = func() { s.work(sess) }
	}
	sess.key, sess.sh = key, sh
	if sh.sessions == nil {
		sh.sessions = make(map[K]*session[K])
	}
	sh.sessions[key] = sess
	return sess
}

// count adds t, whose outcome is known, to the shard's figures.
func (sh *shard[K]) count(t *task) { sh.counts[t.prio][t.outcome]++ }

// recycle keeps an evicted idle record for makeSession. Only a record that
// no handle ever held is recycled, so that a handle never reaches another
// key's session; an idle record has no goroutine, no task in a queue and
// no callback running, and its last goroutine let go of it before the
// shard lock the caller holds was last released. A resolved task may
// still point at it: a resolved task's ctx no longer names its session
// (see callerOf), and cut is cleared here. A paced key's record is not
// recycled either: a stopped pace timer's callback may still look at it
// (see Scheduler.paced).
//
// Such a task's future may still be awaited, by an Await that began before
// the task resolved, and its ctx read: they reach the record's base, never
// the rest. So base is reset field by field, with atomic stores where they
// load, and keeps what they use without a lock, the scheduler and the spare
// parker, which no record ever changes; the rest is zeroed.
func (s *Scheduler[K]) recycle(sess *session[K]) {
	if sess.handled || sess.w.pace != nil {
		return
	}
	sess.base.reset()
	var key K
	sess.key, sess.sh, sess.state, sess.tok, sess.drain = key, nil, stateIdle, false, nil
	sess.high, sess.normal, sess.highRun, sess.cur, sess.reports = fifo{}, fifo{}, 0, nil, nil
	sess.staged.Store(false)
	sess.run, sess.runLast, sess.runLen, sess.runAt = nil, nil, 0, 0
	sess.runLeft.Store(0)
	sess.handles, sess.handled, sess.pause, sess.ctl = 0, false, false, nil
	sess.pred, sess.succ, sess.links = nil, nil, [nLists]links[K]{}
	sess.w = worker[K]{}
	s.records.Put(sess)
}

// unlistIdle takes sess off the idle list, if it is on it, idle or not
// (the list is kept lazily: see keepIdle): a handle pins it, or it is
// forgotten.
func (sh *shard[K]) unlistIdle(sess *session[K]) {
	if sh.idle.contains(sess) {
		sh.idle.remove(sess)
	}
}
