package seqsched

// Runs: a backlogged session's worker takes its Normal tasks a run at a
// time. When advance, in its lock section, puts a Normal task in the
// worker's hand and more wait behind it, takeRun also takes up to
// runMax-1 of them off the Normal lane into the session's run; the worker
// then goes from one to the next with no lock section (runNext), where it
// took the shard lock once a task, and the producer's lock sections no
// longer meet its own on every task (BENCHMARKS.md: on two cores, Savina
// count's time was a third in the lock's contention).
//
// A task of a run has not started until the worker runs it, as one in a
// lane: the worker claims each with a compare-and-swap on runLeft, the
// count of the run's unclaimed tasks (its last runLeft tasks), and every
// lock section that needs the lanes as they are (Pause, a halt, a High
// task's admission, Discard and the give-up) first takes the unclaimed
// ones back to the front of the Normal lane (takeBack), by swapping
// runLeft to zero: whoever wins a task's count owns it. The worker's next
// claim then fails, and it goes on through advance's lock section, which
// sees the lanes, the pause and the High task. Queued and Stats count the
// unclaimed tasks as queued (runLeft), and leave the run alone.
//
// What the worker defers to its next lock section: the shard's counts of
// the tasks a run resolved (runCounts), so Stats' outcomes are exact once
// quiet, as they are documented to be, and may lag while a run goes on.
// Each task is resolved, and its ctx ended, as the worker goes on to the
// next one: the session is running, so it can be seen neither idle nor
// gone.
//
// Only a session that nothing but its Normal lane concerns takes a run
// (see runs), and a run stops before the first task with an option (a
// halt, a tag, a wait for room): those need the lock section between two
// tasks.

// runMax is the most tasks the worker takes in one lock section: the
// task in hand and the run behind it. A turn (WithYieldAfter) bounds it
// too.
const runMax = 16

// runs reports whether sess's worker, which has just put a Normal task in
// hand under the lock, may take a run behind it: what stages asks (no
// queue bound, slot limit, rate or per-key control, no pause), and no
// High task, drain, halt on error, turn clock, record to write or failure
// to report.
func (s *Scheduler[K]) runs(sess *session[K]) bool {
	w := &sess.w
	return sess.normal.n > 0 && sess.high.n == 0 && !w.newTurn && s.stages(sess) && sess.drain == nil &&
		!s.opts.haltOnError && s.opts.yieldInterval == 0 && w.t.prio == Normal &&
		len(w.logs)+len(w.reporting)+len(sess.reports) == 0
}

// takeRun takes a run off sess's Normal lane for its worker: up to runMax
// tasks with the one in hand, no more than its turn has left, and none
// from the first task with an option on. Called with sh.mu held, by the
// worker.
func (s *Scheduler[K]) takeRun(sh *shard[K], sess *session[K]) {
	w := &sess.w
	k := min(runMax, w.limit-w.n) - 1 // w.n does not count the task in hand yet
	q := &sess.normal
	n := 0
	var last *task
	for t := q.head; n < k && t != nil && t.flags == 0; t = t.next {
		last = t
		n++
	}
	if n == 0 {
		return
	}
	first := q.head
	q.head = last.next
	if q.head == nil {
		q.tail = nil
	}
	last.next = nil
	q.n -= n
	sh.queued[Normal] -= n
	sess.run, sess.runLen = first, n
	sess.runLeft.Store(int32(n))
	w.next, w.inRun = first, true
	sh.runs = append(sh.runs, sess)
	sess.runAt = len(sh.runs)
}

// claimNext claims the next task of the worker's run, and reports whether
// it did: false once the run is used up, or a lock section took the rest
// back (takeBack). Only takeBack's swap races the compare-and-swap, and
// it leaves zero: one try is enough.
func (sess *session[K]) claimNext() bool {
	l := sess.runLeft.Load()
	return l > 0 && sess.runLeft.CompareAndSwap(l, l-1)
}

// runNext resolves the task in hand and puts the run's next task, just
// claimed, in its place, with no lock section: the outcome is counted for
// the next one (see endRun).
func (s *Scheduler[K]) runNext(sess *session[K]) {
	w := &sess.w
	done, t := w.t, w.next
	w.next = t.next // read after the claim: takeBack never writes a claimed task's next
	w.t, w.stage = t, stageRun
	w.runCounts[done.outcome]++
	w.ranRun = true
	waiter := done.resolve()
	done.end()
	if waiter != nil {
		waiter.wake()
	}
}

// takeBack puts the unclaimed tasks of sess's run, if any, back at the
// front of its Normal lane, where takeRun took them from: they have not
// started. The run keeps the tasks its worker claimed. Called with sh.mu
// held, by any goroutine.
func (s *Scheduler[K]) takeBack(sh *shard[K], sess *session[K]) {
	if sess.runLen == 0 {
		return
	}
	l := int(sess.runLeft.Swap(0))
	if l == 0 {
		return
	}
	c := sess.runLen - l // claimed: their next fields are the worker's to read, not to change
	first := sess.run
	if c > 0 {
		first = sess.runTask(c).next
	}
	last := first
	for range l - 1 {
		last = last.next
	}
	q := &sess.normal
	last.next = q.head // nil before: takeRun cut the run there
	if q.head == nil {
		q.tail = last
	}
	q.head = first
	q.n += l
	sh.queued[Normal] += l
	sess.runLen = c
}

// runTask returns the i-th task of sess's run, from 1. Called with sh.mu
// held.
func (sess *session[K]) runTask(i int) *task {
	t := sess.run
	for range i - 1 {
		t = t.next
	}
	return t
}

// inHand returns the task sess's worker has in hand, or has staged: the
// last it claimed of its run, if any, else cur. Called with sh.mu held,
// after takeBack (so that no claim moves it on).
func (sess *session[K]) inHand() *task {
	if sess.runLen > 0 && sess.runLeft.Load() == 0 {
		return sess.runTask(sess.runLen)
	}
	return sess.cur
}

// endRun ends sess's run, every task of it claimed or taken back, and
// adds the outcomes its worker counted to the shard's. Called with sh.mu
// held, by the worker, in advance.
func (s *Scheduler[K]) endRun(sh *shard[K], sess *session[K]) {
	w := &sess.w
	if sess.runAt > 0 {
		// The claimed tasks' links, kept for takeBack's walk, are cleared:
		// a task in no lane has a nil next (see fifo).
		for t, i := sess.run, 0; i < sess.runLen; i++ {
			next := t.next
			t.next = nil
			t = next
		}
		i := sess.runAt - 1
		last := len(sh.runs) - 1
		sh.runs[i] = sh.runs[last]
		sh.runs[i].runAt = i + 1
		sh.runs[last] = nil
		sh.runs = sh.runs[:last]
		sess.run, sess.runLen, sess.runAt = nil, 0, 0
	}
	for o, n := range w.runCounts {
		sh.counts[Normal][o] += n
	}
	w.runCounts, w.ranRun, w.next = [nOutcomes]uint64{}, false, nil
}

// runQueued is how many tasks wait unclaimed in the runs of sh's
// sessions. Called with sh.mu held.
func (sh *shard[K]) runQueued() int {
	n := 0
	for _, sess := range sh.runs {
		n += int(sess.runLeft.Load())
	}
	return n
}
