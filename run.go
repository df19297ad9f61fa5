package seqsched

// Runs: a backlogged session's worker takes its Normal tasks a run at a
// time. When advance, in its lock section, puts a Normal task in the
// worker's hand and more wait behind it, takeRun takes the rest of the
// Normal lane as the session's run, in O(1); the worker then goes from
// one task to the next with no lock section (runNext), as far as its turn
// allows, where it took the shard lock once a task: on two cores the
// producer's lock sections no longer meet its own on every task (Savina
// count spent a third of its time in that lock's contention: see
// docs/perf-log.md, "Core v4 on a quiet machine").
//
// A task of a run has not started until the worker runs it, as one in a
// lane: the worker claims each with a compare-and-swap on runLeft, the
// count of the run's unclaimed tasks (its last runLeft), and every lock
// section that needs the lanes as they are (Pause, a halt, a High task's
// admission, Discard and the give-up) first takes the unclaimed ones back
// to the front of the Normal lane (takeBack), by swapping runLeft to
// zero: whoever changes the count owns the task it counts. The worker's
// next claim then fails, and it goes on through advance's lock section,
// which sees the pause, the High task or the drop. A worker whose turn is
// over keeps its run over the yield (keepRun) when nothing else concerns
// the session, and its lock section takes the rest back itself otherwise
// (endRun).
// Queued and Stats count the unclaimed tasks as queued (runLeft), and
// leave the run alone.
//
// The worker defers one thing to its next lock section: the shard's
// counts of the tasks it resolved in a run (runCounts), so Stats' outcomes
// are exact once quiet, as documented, and may lag by a turn's tasks
// while the session runs. Each task is resolved, and its ctx ended, as
// the worker goes on to the next one: the session is running, so it can
// be seen neither idle nor gone.
//
// Only a session that nothing but its Normal lane concerns takes a run
// (see runs). No task of a run is tagged for Replace: a tag makes the
// session's per-key control, and a session with one takes no run. A
// task with HaltOnError may be in one: its halt takes the rest back.

// runs reports whether sess's worker, which has just put a Normal task in
// hand under the lock, may take the rest of the Normal lane as a run:
// nothing but that lane concerns sess (onlyNormal), and no halt on error
// or turn clock is set, and no turn is to begin.
func (s *Scheduler[K]) runs(sess *session[K]) bool {
	w := &sess.w
	return sess.normal.n > 0 && !w.newTurn && !s.opts.haltOnError && s.opts.yieldInterval == 0 &&
		w.t.prio == Normal && s.onlyNormal(sess)
}

// onlyNormal reports whether nothing but its Normal lane concerns sess
// now: what stages asks (no queue bound, slot limit, rate or per-key
// control, so no task tagged for Replace; no pause), and no High task,
// drain, record to write or failure to report. A run is taken (runs) and
// kept over a yield (keepRun) only then.
func (s *Scheduler[K]) onlyNormal(sess *session[K]) bool {
	w := &sess.w
	return sess.high.n == 0 && s.stages(sess) && sess.drain == nil &&
		len(w.logs)+len(w.reporting)+len(sess.reports) == 0
}

// takeRun takes sess's whole Normal lane as its worker's run, in O(1):
// the worker claims from it no more than its turn has left, and the
// lock section at the turn's end keeps the rest (keepRun) or takes it
// back (endRun). Called with sh.mu held, by the worker.
func (s *Scheduler[K]) takeRun(sh *shard[K], sess *session[K]) {
	q := &sess.normal
	n := q.n
	sess.run, sess.runLast, sess.runLen = q.head, q.tail, n
	sess.runLeft.Store(int32(n))
	*q = fifo{}
	sh.queued[Normal] -= n
	w := &sess.w
	w.next, w.inRun = sess.run, true
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
	if done == nil {
		return // the turn's first claim after a yield: keepRun's lock section resolved the last task
	}
	w.runCounts[done.outcome]++
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
	first, last := sess.run, sess.runLast
	if c > 0 {
		claimed := sess.nthOfRun(c)
		first, sess.runLast = claimed.next, claimed
	}
	q := &sess.normal
	last.next = q.head // nil before: it was the lane's last when takeRun took it
	if q.head == nil {
		q.tail = last
	}
	q.head = first
	q.n += l
	sh.queued[Normal] += l
	sess.runLen = c
}

// nthOfRun returns the i-th task of sess's run, from 1. Called with sh.mu
// held.
func (sess *session[K]) nthOfRun(i int) *task {
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
		return sess.nthOfRun(sess.runLen)
	}
	return sess.cur
}

// endRun ends sess's run, every task of it claimed or taken back, and
// adds the outcomes its worker counted to the shard's. Called with sh.mu
// held, by the worker, in advance.
func (s *Scheduler[K]) endRun(sh *shard[K], sess *session[K]) {
	w := &sess.w
	if sess.runAt > 0 {
		s.takeBack(sh, sess) // what the turn left unclaimed
		sess.dropClaimed()
		i := sess.runAt - 1
		last := len(sh.runs) - 1
		sh.runs[i] = sh.runs[last]
		sh.runs[i].runAt = i + 1
		sh.runs[last] = nil
		sh.runs = sh.runs[:last]
		sess.run, sess.runLen, sess.runAt = nil, 0, 0
	}
	sh.countRun(w)
	w.next = nil
}

// dropClaimed takes the tasks sess's worker claimed, all resolved, off the
// front of its run, which goes on from the first unclaimed one, if any.
// Their links, kept for takeBack's walk, are cleared: a task in no lane
// has a nil next (see fifo). Called with sh.mu held, by the worker.
func (sess *session[K]) dropClaimed() {
	left := int(sess.runLeft.Load()) // only takeBack, under sh.mu, and this worker change it
	t := sess.run
	for range sess.runLen - left {
		next := t.next
		t.next = nil
		t = next
	}
	sess.run, sess.runLen = t, left // t is the worker's next, the first unclaimed task
}

// countRun adds the outcomes w counted in a run to the shard's. The worker
// counts only while its session has a run.
func (sh *shard[K]) countRun(w *worker[K]) {
	for o, n := range w.runCounts {
		sh.counts[Normal][o] += n
	}
	w.runCounts = [nOutcomes]uint64{}
}

// keepRun lets sess keep its run over the yield at the end of its worker's
// turn, when unclaimed tasks are left and nothing but its Normal lane
// concerns it (as runs asks): the claimed tasks, all resolved, leave the
// run, which goes on from its first unclaimed task, and their outcomes are
// counted. The worker's next turn then claims on with no lock section,
// where endRun would take the rest back and the next advance take it
// again. Stats counts the session as running over the yield, as it does
// from advance's lock section to the task it puts in hand (see advance).
// It reports whether sess kept its run. Called with sh.mu held, by the
// worker, in advance, with no task in hand.
func (s *Scheduler[K]) keepRun(sh *shard[K], sess *session[K]) bool {
	if sess.runLeft.Load() == 0 || !s.onlyNormal(sess) {
		return false
	}
	sess.dropClaimed()
	sh.countRun(&sess.w)
	return true
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
