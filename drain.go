package seqsched

import (
	"context"
	"log/slog"
)

// How sessions and the scheduler end: Remove drains a key, Discard drops
// its backlog, a handle's Close releases it, Shutdown drains everything and
// gives up at its ctx's end, and Close gives up at once. Every wait here
// knows re-entry by its ctx alone (see callerOf).

// drain is a closing session's end: done is closed when the session is
// forgotten (shard.forget); err is then ErrClosed if Shutdown had given up,
// since accepted tasks of it may have been dropped. Both are written under
// the session's shard lock.
type drain struct {
	done chan struct{}
	err  error
}

// Remove drains session key and forgets it. At once, further submissions
// to key fail with a [*SessionError] wrapping [ErrSessionClosing]; every
// task already accepted still runs (High first, as usual); then the session
// is forgotten, every handle on it is closed, and Remove returns nil. The
// key can then be used again as a fresh session. When Remove returns nil,
// every task accepted for key has run, its future is resolved, and every
// failure of a posted one reported.
//
// If ctx ends first, Remove returns ctx's error and the drain still
// completes. Given the ctx of a task of the session itself (or of a
// callback run for it), Remove cannot wait for it: it starts the drain and
// returns [ErrWouldDeadlock]. Under [WithMaxConcurrency] such a caller lends
// its slot while it waits, as [Future.Await] does. Once Shutdown has given
// up, Remove returns [ErrClosed]: accepted tasks may have been dropped.
// A paused key (see [Scheduler.Pause]) drains only after Resume: when
// Remove has to wait for one with work parked (no task of it running), it
// logs so at Warn, once, saying how to end the wait (Resume, Discard, or a
// ctx with a deadline).
// Removing an unknown or idle key returns nil. A key a map cannot hold
// returns a [*KeyError]. Any number of callers may remove the same key.
func (s *Scheduler[K]) Remove(ctx context.Context, key K) error {
	return s.closeKey(ctx, key, false)
}

// Discard ends session key without running its backlog: at once, new tasks
// are refused (a [*SessionError] wrapping [ErrSessionClosing]), every queued
// task of the key, High and Normal (those of a closing session that a newly
// opened one waits behind included), resolves with [ErrDiscarded] without
// running (a posted task's failure is reported like any other), the running
// task's ctx is canceled ([Cause] then returns ErrDiscarded), and the
// session is forgotten once that task returns and the failures are
// reported; every handle on it is closed. Discard returns nil then, ctx's
// error if ctx ends first (the discarding is done all the same), or
// [ErrWouldDeadlock] when given the ctx of the session's own task or
// callback, having done the discarding. Under [WithMaxConcurrency], a
// session waiting for a slot with dropped posts to report reports them when
// its turn comes, and Discard returns then. Its other rules are Remove's. It
// is how a server kicks a client, freezes an account or drops a slow
// consumer.
func (s *Scheduler[K]) Discard(ctx context.Context, key K) error {
	return s.closeKey(ctx, key, true)
}

// closeKey is Remove (discard false) and Discard by key.
func (s *Scheduler[K]) closeKey(ctx context.Context, key K, discard bool) error {
	if !s.usable() {
		return ErrNotNew
	}
	if ctx == nil {
		return ErrNilContext
	}
	if err := s.validKey(key); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	sess := sh.sessions[key]
	if sess == nil {
		sh.mu.Unlock()
		if s.core.gaveUp.Load() {
			return ErrClosed
		}
		return nil
	}
	return s.closeSession(ctx, sh, sess, discard)
}

// end closes sess, discarding the key's backlog if asked, unlocks sh, and
// waits for the drain. Called with sh.mu held.
func (s *Scheduler[K]) closeSession(ctx context.Context, sh *shard[K], sess *session[K], discard bool) error {
	d := s.startClosing(sh, sess)
	held := false // a session of the key is parked with work: the drain waits for Resume
	var resolved []wakeUp
	var cut []*task
	var starts []*session[K]
	if discard {
		// The key's whole backlog: sess's, and that of the closing
		// sessions it waits behind (see open).
		for p := sess; p != nil; p = p.pred {
			if p != sess {
				s.startClosing(sh, p)
			}
			var start *session[K]
			if resolved, start = s.drop(sh, p, ErrDiscarded, outcomeDiscarded, resolved); start != nil {
				starts = append(starts, start)
			}
			if t := p.inHand(); t != nil && p.state == stateRunning {
				p.cut.Store(t)
				cut = append(cut, t)
			}
		}
	}
	if !discard && d.err == nil {
		// Accepted work is not given up unless ctx says so: a session of
		// the key parked with work has its worker say what the wait is
		// for, and how to end it, then park again.
		for p := sess; p != nil; p = p.pred {
			if p.state == statePaused && p.hasWork() && !held {
				held = true
				s.log(p, slog.LevelWarn, "seqsched: Remove waits for a paused key with work; Resume or Discard it, or pass a ctx with a deadline")
				if s.rq.schedule(sh, p) {
					starts = append(starts, p)
				}
			}
		}
	}
	s.unlock(sh)
	s.finish(resolved, starts)
	for _, t := range cut {
		t.end() // its ctx ends; Cause says ErrDiscarded
	}
	return s.wait(ctx, &sess.base, d)
}

// finish wakes the waiters of tasks that were dropped under a lock, ends
// their ctxs, and starts the goroutines of sessions that were made running
// for their reports.
func (s *Scheduler[K]) finish(resolved []wakeUp, starts []*session[K]) {
	for _, u := range resolved {
		u.wake()
	}
	for _, sess := range starts {
		go sess.start()
	}
}

// wait waits for d, the drain of target: until it ends, or ctx does. A
// caller that runs on target's worker (or one target waits behind), known
// by its ctx, would wait for itself: it gets ErrWouldDeadlock at once.
func (s *Scheduler[K]) wait(ctx context.Context, target *base, d *drain) error {
	select {
	case <-d.done:
		return d.err
	default:
	}
	caller := callerOf(ctx)
	if caller != nil && target.behind(caller) {
		return ErrWouldDeadlock
	}
	if caller != nil {
		if reclaim := caller.core.lend(caller); reclaim != nil {
			defer reclaim()
		}
	}
	select {
	case <-d.done:
		return d.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown stops the scheduler in one call: it drains, and it gives up when
// ctx ends. At once, every Submit fails with [ErrClosed]; every accepted
// task still runs (tasks cannot add new ones); Shutdown returns nil when
// every goroutine the scheduler started has returned, and with them every
// failure of a posted task has been reported.
//
// If ctx ends first, Shutdown gives up, as [Scheduler.Close] does at once,
// and returns ctx's error without waiting for running tasks. Like nats.go's
// Drain with a timeout, and unlike http.Server.Shutdown, which never
// forces, the end of ctx is forceful.
//
// Accepted work is never given up unless ctx says so: the tasks of a
// paused or halted key (see [Scheduler.Pause]) wait for Resume, so
// Shutdown(context.Background()) waits for ever while such a key has work.
// When Shutdown begins to wait on such keys it logs so at Warn, once, with
// their count and how to end the wait: Resume or Discard them, or pass a
// ctx with a deadline.
//
// Given the ctx of a task or callback of this scheduler, Shutdown begins as
// above but cannot wait for its caller: it returns [ErrWouldDeadlock].
// Shutdown is safe to call again and concurrently: a later call waits
// again, and returns nil once the goroutines are gone, even after a give-up.
func (s *Scheduler[K]) Shutdown(ctx context.Context) error {
	if !s.usable() {
		return ErrNotNew
	}
	if ctx == nil {
		return ErrNilContext
	}
	s.closeAdmission()
	caller := callerOf(ctx)
	if caller != nil && caller.core == &s.core {
		return ErrWouldDeadlock
	}
	if n := s.pausedWithWork(); n > 0 {
		select {
		case <-s.quiet:
		default:
			// Accepted work is not given up unless ctx says so: say what
			// the wait is for, and how to end it. The record names no
			// session: its callback ctx names a record of none.
			none := new(session[K])
			none.base.core = &s.core
			s.warn(none, "seqsched: Shutdown waits for paused or halted keys with work; Resume or Discard them, or pass Shutdown a ctx with a deadline",
				slog.Int("keys", n))
		}
	}
	select {
	case <-s.quiet:
		return nil
	case <-ctx.Done():
		s.giveUp()
		return ctx.Err()
	}
}

// warn writes a Warn record about the wait Shutdown begins on paused keys
// as every record is written: on a goroutine of the scheduler, with no
// lock held, given a callback ctx that names sess (a record of no key; see
// WithLogger). The goroutine holds a live token, so Shutdown waits for it
// (none is started once the scheduler is quiet); whatever ends the logger
// (a return, a panic, which drops the record as a worker's guard does, or
// runtime.Goexit) gives it back.
func (s *Scheduler[K]) warn(sess *session[K], msg string, attrs ...slog.Attr) {
	sh := &s.shards[0] // any stripe serves; sess may be a record of no shard
	if !s.takeTokenUnlessQuiet(sh) {
		return
	}
	go func() {
		defer s.addTokens(sh, -1)
		c := &callbackCtx{Context: context.Background(), sess: &sess.base}
		c.active.Store(true)
		defer c.active.Store(false)
		defer func() { _ = recover() }() // the record is dropped: there is nowhere else to write it
		if l := s.opts.logger; l.Enabled(c, slog.LevelWarn) {
			l.LogAttrs(c, slog.LevelWarn, msg, attrs...)
		}
	}()
}

// pausedWithWork counts the keys paused (or halted) with tasks queued or
// failures to report: the work Shutdown waits for until Resume, Discard
// or its ctx's end.
func (s *Scheduler[K]) pausedWithWork() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, sess := range sh.sessions {
			for p := sess; p != nil; p = p.pred {
				if p.pause && p.hasWork() {
					n++
					break
				}
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Close gives up at once: it drains nothing (to drain, call
// [Scheduler.Shutdown]; a handle's [Session.Close], by contrast, drains its
// session). It does what a Shutdown whose ctx has ended does: Submit
// fails with [ErrClosed], no further task starts (one that a worker was
// starting at that instant may still begin), running tasks' ctxs are
// canceled, under [WithMaxConcurrency] a task coming back from an Await no
// longer waits for a slot, and every task not yet started resolves with
// ErrClosed. Close does not wait for running tasks: the failures of posted
// tasks it dropped are reported on the scheduler's goroutines, possibly
// after Close returned, and a later Shutdown that returns nil finds them
// reported and every goroutine gone. A Remove or Discard waiting meanwhile
// returns ErrClosed. Close is safe to call again, and returns nil
// ([ErrNotNew] for a Scheduler not made by New).
func (s *Scheduler[K]) Close() error {
	if !s.usable() {
		return ErrNotNew
	}
	s.closeAdmission()
	s.giveUp()
	return nil
}

// closeAdmission refuses new tasks, then passes the barrier: every shard
// lock is taken once, so every Submit that saw closed unset has taken its
// live token (see Scheduler.afterSeal), and the scheduler can be sealed.
func (s *Scheduler[K]) closeAdmission() {
	s.core.closed.Store(true)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.refuseAllRoom() // the barrier: nothing waits for room past it
		sh.mu.Unlock()
	}
	s.seal()
}

// giveUp is the give-up, once: no task starts from now on, running tasks'
// ctxs end, the slot limit is lifted, and every queued task resolves with
// ErrClosed (posted ones are reported by their session's goroutine).
func (s *Scheduler[K]) giveUp() {
	s.giveUpOnce.Do(func() {
		s.core.gaveUp.Store(true)
		s.core.cancel()
		s.rq.giveUp()
		for i := range s.shards {
			sh := &s.shards[i]
			var resolved []wakeUp
			var starts []*session[K]
			sh.mu.Lock()
			for _, sess := range sh.sessions {
				for p := sess; p != nil; p = p.pred {
					var start *session[K]
					if resolved, start = s.drop(sh, p, ErrClosed, outcomeSkipped, resolved); start != nil {
						starts = append(starts, start)
					}
				}
			}
			s.unlock(sh)
			s.finish(resolved, starts)
		}
	})
}
