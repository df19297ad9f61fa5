package seqsched

// Replace: latest wins. A task tagged with Replace(tag) is queued as usual
// and remembered in its session's tags, one slot per (priority, tag). A
// later task of the same priority and tag that finds the slot takes the
// queued one's place: the queued node stays in its FIFO, and the slot now
// says which task runs when the node is picked (cur). The replaced task
// resolves with ErrReplaced at once. pick looks a tagged node's slot up
// (a few tags per session at most, so a slice), runs its cur, and frees
// the tag.

// control is the per-key control state of a session (see session.ctl),
// guarded by its shard lock.
type control struct {
	tags []tagSlot   // queued tasks tagged with Replace
	room [2]roomLine // callers waiting for room, by priority (room.go)
}

// tagSlot is a queued node tagged with Replace, and the task it stands for
// now: the node itself, or the latest task that replaced it.
type tagSlot struct {
	tag       string
	prio      Priority
	node, cur *task
}

// controls returns sess's control state, making it.
func (sess *session[K]) controls() *control {
	if sess.ctl == nil {
		sess.ctl = new(control)
	}
	return sess.ctl
}

// replace puts t in the place of the task of sess queued under tag with
// t's priority, if there is one, and returns that task, failed with
// ErrReplaced and counted, for the caller to wake (wakeUp.wake) once the
// lock is released; ok says whether there was one. Called with sh.mu held.
func (s *Scheduler[K]) replace(sh *shard[K], sess *session[K], t *task, tag string) (d wakeUp, ok bool) {
	if sess.ctl == nil {
		return d, false
	}
	for i := range sess.ctl.tags {
		sl := &sess.ctl.tags[i]
		if sl.tag != tag || sl.prio != t.prio {
			continue
		}
		old := sl.cur
		t.sess = &sess.base
		sl.cur = t
		sh.submitted++
		old.job.fail(ErrReplaced, outcomeReplaced)
		sh.count(old)
		d = wakeUp{old, old.resolve()}
		if old.job.failure() != nil {
			s.reportLater(sess, old)
		}
		return d, true
	}
	return d, false
}

// tag remembers t, just queued on sess, under tag. Called with sh.mu held.
func (s *Scheduler[K]) tag(sess *session[K], t *task, tag string) {
	c := sess.controls()
	t.flags |= flagTagged
	c.tags = append(c.tags, tagSlot{tag: tag, prio: t.prio, node: t, cur: t})
}

// untag returns the task that tagged node n, just picked, stands for, and
// frees its tag. Called with sh.mu held.
func (sess *session[K]) untag(n *task) *task {
	tags := sess.ctl.tags
	for i := range tags {
		if tags[i].node != n {
			continue
		}
		cur := tags[i].cur
		last := len(tags) - 1
		tags[i] = tags[last]
		tags[last] = tagSlot{}
		sess.ctl.tags = tags[:last]
		return cur
	}
	return n // unreachable: every tagged node has a slot until it is picked
}

// reportLater has sess's worker report t's failure: a posted task that
// failed without its worker in hand (replaced). A session with no
// goroutine has queued work, and reports when it next runs. Called with
// sh.mu held.
func (s *Scheduler[K]) reportLater(sess *session[K], t *task) {
	sess.reports = append(sess.reports, t)
}
