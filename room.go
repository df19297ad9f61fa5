package seqsched

import "context"

// WaitForRoom: a caller that finds its lane of a session full (WithMaxQueue)
// waits in that lane's line, with its task built. The session's worker
// makes room by taking a task off the lane (take), and admits the oldest
// waiter's task there and then, under the same lock: room goes to waiters
// in the order they came, and a newcomer never overtakes them (the lane
// stays full while anyone waits, so a newcomer waits or is refused). A
// waiter whose ctx ends leaves the line; one still in line when its
// session closes, or when Shutdown begins, is refused.

// roomLine is the callers waiting for room in one lane of a session, oldest
// first. A waiter that gave up is marked out and skipped.
type roomLine struct {
	head, tail *roomWaiter
}

// roomWaiter is a caller waiting for room. done is closed when it leaves
// the line: admitted (err nil) or refused (err says why).
type roomWaiter struct {
	t    *task
	tag  string
	next *roomWaiter
	in   bool // in line; guarded by the shard lock
	err  error
	done chan struct{}
}

func (l *roomLine) push(w *roomWaiter) {
	w.in = true
	if l.tail == nil {
		l.head = w
	} else {
		l.tail.next = w
	}
	l.tail = w
}

// pop returns the oldest waiter still in line, or nil.
func (l *roomLine) pop() *roomWaiter {
	for l.head != nil {
		w := l.head
		l.head = w.next
		if l.head == nil {
			l.tail = nil
		}
		w.next = nil
		if w.in {
			return w
		}
	}
	return nil
}

// leave takes w out of line with err, and lets its caller go. Called with
// the shard lock held.
func (w *roomWaiter) leave(err error) {
	w.in, w.err = false, err
	close(w.done)
}

// waitForRoom queues t's caller in sess's line for t's lane and waits for
// room, ctx's end, or a refusal. Called with sh.mu held; it unlocks it.
// caller is the session whose task or callback calls, known by ctx.
func (s *Scheduler[K]) waitForRoom(ctx context.Context, sh *shard[K], sess *session[K], t *task, tag string, caller *base) error {
	if caller != nil && sess.base.behind(caller) {
		sh.mu.Unlock()
		return ErrWouldDeadlock // only its own worker could make room
	}
	w := &roomWaiter{t: t, tag: tag, done: make(chan struct{})}
	sess.controls().room[t.prio].push(w)
	sh.waiters++
	sh.mu.Unlock()
	if caller != nil {
		if reclaim := caller.core.lend(caller); reclaim != nil {
			defer reclaim()
		}
	}
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
	}
	err := ctx.Err() // read before the lock: no method of a caller's value runs under it
	sh.mu.Lock()
	if w.in {
		sh.waiters--
		w.leave(err)
	}
	sh.mu.Unlock()
	return w.err
}

// makeRoom admits the oldest waiters of sess's lane prio while it has room,
// after the worker took a task off it, for which sess is running: a task a
// waiter replaces is left for its worker to finish. Called with sh.mu
// held, only when sess has control state.
func (s *Scheduler[K]) makeRoom(sh *shard[K], sess *session[K], prio Priority) {
	line := &sess.ctl.room[prio]
	q := &sess.normal
	if prio == High {
		q = &sess.high
	}
	for q.n < s.opts.maxQueue {
		w := line.pop()
		if w == nil {
			return
		}
		sh.waiters--
		if w.tag != "" {
			if old, ok := s.replace(sh, sess, w.t, w.tag); ok {
				w.leave(nil)
				// Finished by the worker once the lock is released (step).
				sess.w.replaced = append(sess.w.replaced, old)
				continue
			}
		}
		if w.tag != "" {
			s.tag(sess, w.t, w.tag)
		}
		s.admit(sh, sess, w.t) // sess runs: nothing to schedule
		w.leave(nil)
	}
}

// refuseRoom refuses every caller waiting for room in sess's lines with
// err (ErrClosed: Shutdown began), or with nil err a *SessionError
// wrapping ErrSessionClosing: the session closes. Called with sh.mu held.
func (sh *shard[K]) refuseRoom(sess *session[K], err error) {
	if sess.ctl == nil || sh.waiters == 0 {
		return
	}
	if err == nil {
		err = &SessionError{Key: sess.key, Err: ErrSessionClosing}
	}
	for i := range sess.ctl.room {
		for w := sess.ctl.room[i].pop(); w != nil; w = sess.ctl.room[i].pop() {
			sh.waiters--
			w.leave(err)
		}
	}
}

// refuseAllRoom refuses every caller waiting for room in sh with ErrClosed.
// Called by Shutdown and Close with sh.mu held.
func (sh *shard[K]) refuseAllRoom() {
	if sh.waiters == 0 {
		return
	}
	for _, sess := range sh.sessions {
		for p := sess; p != nil; p = p.pred {
			sh.refuseRoom(p, ErrClosed)
		}
	}
}
