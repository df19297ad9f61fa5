package seqsched

// Pause and Resume, and halts. A paused session starts no task: its
// running task, if any, finishes, and then its worker parks it (statePaused)
// and goes on with other work, so that a paused session holds no goroutine
// and no slot. It still accepts tasks (WithMaxQueue bounds them). Resume
// makes it idle again, or schedules it when it has work, at the back of
// the queue for a goroutine like any session that gets work.
//
// A paused session with work (queued tasks, or failures to report) holds a
// live token, so that Shutdown waits for it: accepted work is not given up
// before Shutdown's ctx says so. One with no work holds nothing, and is
// kept in its shard's map (never as an idle record) until Resume, Remove
// or Discard.

// Pause pauses session key: it starts no new task until [Scheduler.Resume]
// (its running task, if any, finishes; one that its worker was starting at
// that instant may still begin), holds no goroutine and no slot meanwhile,
// and still accepts tasks, bounded by [WithMaxQueue]; Resume runs them in
// order. A task starts when its session's goroutine runs it, not when it
// is accepted: a task just submitted to an idle key, whose goroutine is on
// its way, is held. Pausing an unknown or idle key makes its session,
// paused, so that the tasks that come next wait. Pause applies to the key:
// a closing session that key's new one waits behind is paused too, and so
// is the session [Scheduler.Open] makes for the key while it closes.
//
// Pause and Resume are not counted: one Resume ends any number of Pauses
// (and a halt, see [HaltOnError]). [Scheduler.Remove] of a paused key, or
// the Close of its last handle, refuses new tasks at once but drains only
// after Resume (it waits, or returns when its ctx ends); one with no task
// queued is forgotten at once; [Scheduler.Discard] ends it at once.
// Shutdown waits for paused sessions' tasks too, until Resume lets them
// run or Shutdown's ctx ends and drops them with [ErrClosed]: accepted
// work is never given up unless the caller's ctx says so. Stats counts
// paused sessions in Paused.
//
// Pause returns [ErrClosed] once Shutdown or Close has begun, a
// [*KeyError] for a key a map cannot hold, and nil otherwise. It never
// waits.
func (s *Scheduler[K]) Pause(key K) error {
	if !s.usable() {
		return ErrNotNew
	}
	if err := s.validKey(key); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.core.closed.Load() {
		return ErrClosed
	}
	sess := sh.sessions[key]
	if sess == nil {
		sess = s.makeSession(sh, key)
	}
	s.pause(sh, sess)
	return nil
}

// Resume ends a pause (or a halt) of session key: its queued tasks run in
// order, as those of any session that gets work. Resuming a key that is
// not paused does nothing. Resume works after Shutdown has begun (a
// Shutdown waiting for a paused session's tasks then sees them run). It
// returns a [*KeyError] for a key a map cannot hold, and nil otherwise. It
// never waits.
func (s *Scheduler[K]) Resume(key K) error {
	if !s.usable() {
		return ErrNotNew
	}
	if err := s.validKey(key); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	starts := s.resume(sh, sh.sessions[key])
	s.unlock(sh)
	for _, sess := range starts {
		go sess.start()
	}
	return nil
}

// Paused reports whether key is paused, by [Scheduler.Pause] or a halt
// ([HaltOnError]), and not yet resumed: its session, or a closing one of
// the key that its new session waits behind (see [Scheduler.Open]).
func (s *Scheduler[K]) Paused(key K) bool {
	if !s.usable() || s.validKey(key) != nil {
		return false
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for p := sh.sessions[key]; p != nil; p = p.pred {
		if p.pause {
			return true
		}
	}
	return false
}

// Pause pauses the handle's session, as [Scheduler.Pause] does for its
// key. A closed handle, or one whose session ended, returns a
// [*SessionError] wrapping [ErrSessionClosing].
func (h *Session[K]) Pause() error {
	if !h.usable() {
		return ErrNotNew
	}
	sh := h.sess.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if h.closed || h.sess.state == stateGone {
		return &SessionError{Key: h.key, Err: ErrSessionClosing}
	}
	if h.s.core.closed.Load() {
		return ErrClosed
	}
	h.s.pause(sh, h.sess)
	return nil
}

// Resume resumes the handle's session, as [Scheduler.Resume] does for its
// key. A closed handle, or one whose session ended, returns a
// [*SessionError] wrapping [ErrSessionClosing].
func (h *Session[K]) Resume() error {
	if !h.usable() {
		return ErrNotNew
	}
	sh := h.sess.sh
	sh.mu.Lock()
	if h.closed || h.sess.state == stateGone {
		sh.mu.Unlock()
		return &SessionError{Key: h.key, Err: ErrSessionClosing}
	}
	starts := h.s.resume(sh, h.sess)
	h.s.unlock(sh)
	for _, sess := range starts {
		go sess.start()
	}
	return nil
}

// pause sets the pause of sess and the closing sessions it waits behind;
// an idle one is paused at once, and so is a paced one (its timer stopped,
// its token for the next task given back; it keeps its live token: it has
// work), the others when their worker or release next looks. Called with
// sh.mu held.
func (s *Scheduler[K]) pause(sh *shard[K], sess *session[K]) {
	for p := sess; p != nil; p = p.pred {
		p.pause = true
		switch p.state {
		case stateRunning:
			s.unstage(sh, p) // not started: its worker parks instead
			s.takeBack(sh, p)
		case stateIdle:
			s.fire(sh, p, evPause)
		case statePaced:
			p.unpace()
			p.w.pace.unreserve()
			s.fire(sh, p, evPause)
		}
	}
}

// resume clears the pause of sess and the closing sessions it waits
// behind, moves each paused one on, and returns those whose goroutine the
// caller must start once the lock is released. Called with sh.mu held.
func (s *Scheduler[K]) resume(sh *shard[K], sess *session[K]) (starts []*session[K]) {
	for p := sess; p != nil; p = p.pred {
		if !p.pause {
			continue
		}
		p.pause = false
		if p.state == statePaused && s.unpause(sh, p) {
			starts = append(starts, p)
		}
	}
	return starts
}

// unpause moves paused sess on: scheduled if it has work, else idle. It
// reports whether the caller must start a goroutine on it. Called with
// sh.mu held.
func (s *Scheduler[K]) unpause(sh *shard[K], sess *session[K]) (start bool) {
	if sess.hasWork() {
		return s.rq.schedule(sh, sess)
	}
	s.fire(sh, sess, evResume)
	return false
}

// halts reports whether t, just run, halts its session: it was run with
// HaltOnError, and fn failed.
func halts(t *task) bool {
	return t.flags&flagHalt != 0 && (t.outcome == outcomeFailed || t.outcome == outcomePanicked)
}

// halt pauses sess, whose task failed with HaltOnError, as its worker
// reports the halt (report.go), before it takes another task.
func (s *Scheduler[K]) halt(sess *session[K]) {
	sh := sess.sh
	sh.mu.Lock()
	sess.pause = true
	sh.halts++
	s.takeBack(sh, sess)
	sh.mu.Unlock()
}
