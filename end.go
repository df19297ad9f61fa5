package seqsched

import "context"

// How sessions and the scheduler end: Remove, Discard and Close drain or
// discard a session; Shutdown drains the scheduler or gives up.

// Remove drains session key and forgets it. At once, further submissions to
// key fail with a [*SessionError] wrapping [ErrSessionClosing]; every task
// already accepted still runs (High first, as usual); then the session is
// forgotten, every handle on it is closed, and Remove returns nil. The key
// can then be used again as a fresh session.
//
// If ctx ends first, Remove returns ctx's error and the drain still
// completes. Called from the session's own running task (with its ctx, or
// from its fn or a callback run for it with any ctx), Remove cannot wait
// for it: it starts the drain and returns [ErrWouldDeadlock]. Under
// WithMaxConcurrency, a task (or callback) that waits in Remove lends its
// slot while it waits, as Await does. Once Shutdown has given up (a forced
// Shutdown), Remove returns [ErrClosed]: accepted tasks may have been
// dropped. Removing an unknown or idle key returns nil (and drops the idle
// key's record at once). A key a map cannot hold returns a [*KeyError], and
// a ctx whose methods panic the [*PanicError]. When Remove returns nil,
// every task accepted for key has run, its future is resolved, and every
// failure of a posted one reported. Remove is safe for concurrent use; any
// number of callers may remove the same key.
func (s *Scheduler[K]) Remove(ctx context.Context, key K) error {
	return s.endKey(ctx, key, false)
}

// Discard ends session key without running its backlog: at once, new tasks
// are refused (a [*SessionError] wrapping [ErrSessionClosing]), every
// queued task of the key, High and Normal (those of a closing session that
// a newly opened one waits behind included), resolves with [ErrDiscarded] without
// running (a posted task's failure is reported like any other), the
// running task's ctx is canceled with ErrDiscarded as its cause, and the
// session is forgotten once that task returns; every handle on it is
// closed. Discard returns nil then, or ctx's error if ctx ends first (the
// discarding is done all the same), or [ErrWouldDeadlock] when called from
// the session's own task (or a callback run for it), having done the
// discarding. Its other rules are Remove's. It is how a server kicks a
// client, freezes an account or drops a slow consumer.
func (s *Scheduler[K]) Discard(ctx context.Context, key K) error {
	return s.endKey(ctx, key, true)
}

// endKey is Remove (discard unset) and Discard by key.
func (s *Scheduler[K]) endKey(ctx context.Context, key K, discard bool) error {
	if s == nil || s.shards == nil {
		return ErrNotNew
	}
	if ctx == nil {
		return ErrNilContext
	}
	if err := s.validKey(key); err != nil {
		return err
	}
	c, err := s.callerOf(ctx) // the caller's code, before anything changes
	if err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	sess := sh.sessions[key]
	if sess == nil {
		sh.mu.Unlock()
		if s.forced.Load() {
			return ErrClosed
		}
		return nil
	}
	return s.end(ctx, c, sh, sess, discard)
}

// end closes sess (discarding its backlog if asked), unlocks sh, and waits
// for the drain (see Remove and Discard). Called with sh.mu held.
func (s *Scheduler[K]) end(ctx context.Context, c caller[K], sh *shard[K], sess *session[K], discard bool) error {
	d, forgotten := s.close(sh, sess)
	var dropped []*task
	var waiters []*waiter
	var cur *task
	if discard {
		// The key's whole backlog: sess's, and that of the closing
		// sessions it is held back behind (see succeed).
		for p := sess; p != nil; p = p.pred {
			n := len(dropped)
			dropped = sh.discard(p, dropped)
			if len(dropped) > n {
				sh.holdBack(p)
			}
			if p.cur != nil {
				cur = p.cur
			}
		}
		for _, t := range dropped {
			waiters = append(waiters, t.job.publish()) // before the drain can end
		}
	}
	var reports []*task
	for _, t := range dropped {
		if _, ok := t.job.(*posted[K]); ok {
			reports = append(reports, t)
		}
	}
	if len(reports) > 0 {
		d.pending++   // the reporter settles it
		s.takeToken() // the reporter's, under the lock: Shutdown cannot return before it reports
	}
	// A discarded session waiting for a slot has nothing left to run: it
	// retires now rather than when its turn in the ready queue comes.
	var r retirement[K]
	unqueued := discard && sess.scheduled && s.retireQueued(sh, sess, &r)
	self := c.runs(sess) || c.reports(sess, d)
	sh.mu.Unlock()
	for i, t := range dropped {
		t.job.wake(waiters[i])
	}
	if len(reports) > 0 {
		s.startReporter(reports, []*drain{d}, []*shard[K]{sh})
	}
	if forgotten {
		s.recycle(sess)
	}
	if unqueued {
		s.finish(&r)
		if r.then == nil { // else a successor with work waits in its place, with its token
			s.release(1) // the token it waited with
		}
	}
	if cur != nil {
		cur.discard() // may run the submit ctx's code: last, with everything done
	}
	if self {
		return ErrWouldDeadlock
	}
	return s.wait(ctx, c, d.done, &d.err)
}

// Shutdown stops the scheduler. At once, every Submit fails with
// [ErrClosed]; every accepted task still runs (tasks cannot add new ones);
// Shutdown returns nil when every goroutine the scheduler started has
// returned, and with them every failure of a posted task has been
// reported.
//
// If ctx ends first, Shutdown gives up: no further task starts (one that a
// worker was starting at that instant may still begin, and its ctx is
// canceled like the others), running tasks' contexts are canceled, under
// WithMaxConcurrency a task coming back from an Await no longer waits for a
// slot, every task not yet started resolves with [ErrClosed], and Shutdown
// returns ctx's error without waiting for running tasks. The failures of
// posted tasks it dropped are reported on a goroutine of the scheduler,
// possibly after Shutdown returned; a later Shutdown that returns nil finds
// them reported. Unlike http.Server.Shutdown, the give-up is forceful.
//
// Called from a task of this scheduler (with its ctx, or from its fn or a
// callback with any ctx), Shutdown begins as above but cannot wait for the
// goroutine calling it: it returns [ErrWouldDeadlock]. Shutdown is safe to
// call again and concurrently: a later call waits again, and returns nil
// once the goroutines are gone. A ctx whose methods panic returns the
// [*PanicError] before anything is done.
func (s *Scheduler[K]) Shutdown(ctx context.Context) error {
	if s == nil || s.shards == nil {
		return ErrNotNew
	}
	if ctx == nil {
		return ErrNilContext
	}
	c, err := s.callerOf(ctx)
	if err != nil {
		return err
	}
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if shutdownClosedHook != nil {
			shutdownClosedHook()
		}
		// Barrier: a Submit that saw closed unset has finished enqueueing.
		for i := range s.shards {
			s.shards[i].mu.Lock()
			s.shards[i].mu.Unlock() //nolint:staticcheck // empty critical section is the point
		}
		s.seal() // quiet now if every token is back already
	})
	if c.t != nil || c.w != nil {
		return ErrWouldDeadlock // the caller's own goroutine keeps the scheduler busy
	}
	select {
	case <-s.quiet:
		return nil
	default:
	}
	done, perr := ctxDone(ctx)
	if perr != nil {
		return perr
	}
	select {
	case <-s.quiet:
		return nil
	case <-done:
	}
	s.abort()
	return ctxErr(ctx)
}

// abort is Shutdown giving up: cancel running tasks, empty the ready queue
// and every session's queues, resolve what was dropped with ErrClosed, and
// start a reporter for the posted tasks among them.
func (s *Scheduler[K]) abort() {
	s.takeToken() // a reporter's, taken before anything is dropped: given back if none is needed
	s.forced.Store(true)
	s.cancel()
	// Sessions waiting for a slot have no worker: retire them here.
	waiting := s.abortSlots()
	var reports []*task
	for i := range s.shards {
		sh := &s.shards[i]
		var dropped []*task
		var waiters []*waiter
		var r retirement[K]
		sh.mu.Lock()
		for _, sess := range sh.sessions {
			for p := sess; p != nil; p = p.pred { // with the closing sessions a successor replaced
				for t := p.pop(0); t != nil; t = p.pop(0) {
					sh.queued[t.prio]--
					t.job.settle(ErrClosed, outcomeSkipped)
					sh.count(t)
					dropped = append(dropped, t)
					waiters = append(waiters, t.job.publish()) // under the lock: a drain ends after this
				}
				if p.closing != nil {
					p.closing.err = ErrClosed
				}
				sh.holdBack(p)
			}
		}
		for _, sess := range waiting {
			if sess.sh == sh {
				s.retire(sh, sess, &r)
			}
		}
		sh.mu.Unlock()
		for i, t := range dropped {
			t.job.wake(waiters[i])
			if _, ok := t.job.(*posted[K]); ok {
				reports = append(reports, t)
			}
		}
		s.finish(&r)
	}
	n := int64(len(waiting)) // their tokens
	if len(reports) > 0 {
		s.startReporter(reports, nil, nil) // with the token taken at the start
	} else {
		n++
	}
	s.release(n)
}

// wait blocks until done is closed (then returns *result) or ctx ends
// (then returns ctx's error), lending the caller's slot meanwhile.
func (s *Scheduler[K]) wait(ctx context.Context, c caller[K], done <-chan struct{}, result *error) error {
	if ls := c.slot(); ls != nil && s.lend(ls) {
		defer s.reclaim(ls)
	}
	ctxDone, perr := ctxDone(ctx)
	if perr != nil {
		return perr
	}
	select {
	case <-done:
		return *result
	case <-ctxDone:
		select {
		case <-done:
			return *result
		default:
			return ctxErr(ctx)
		}
	}
}

// drain is what Remove, Discard and the last Close wait on: done is closed
// once the session is forgotten, every future of its tasks has resolved and
// every failure of its posted tasks was reported. pending counts what must
// still happen (the session's retirement, a reporter's reports); err is
// ErrClosed when a forced Shutdown cut the session short. Guarded by sh.mu,
// but done.
type drain struct {
	done    chan struct{}
	pending int
	err     error
}

// end closes d.done; nil-safe. Called with no lock held.
func (d *drain) end() {
	if d != nil {
		close(d.done)
	}
}

// settle counts one pending end of d and returns d if it was the last (for
// the caller to end once the lock is released). Called with sh.mu held.
func (d *drain) settle() *drain {
	if d.pending--; d.pending == 0 {
		return d
	}
	return nil
}
