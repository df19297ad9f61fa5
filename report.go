package seqsched

import (
	"context"
	"log/slog"
	"time"
)

// What a worker reports, and how: a posted task's failure goes to the error
// handler, or without one to the log; the scheduler's own records (a panic,
// a slow task, a bad weight) go to the log. Both are user code: each runs
// under the worker's guard, with a callbackCtx that identifies the worker,
// and a record is taken off the worker's list before it is written, so
// that a logger that panics loses that record only.

// record is a log record a worker is to write about its session.
type record struct {
	level slog.Level
	msg   string
	attrs []slog.Attr
}

// report hands t's failure, if it is a posted task with one, to the error
// handler; without one, to the log. The level says where the failure came
// from, never what the error is: fn's own error is Error, a task that the
// give-up (Close, or a Shutdown whose ctx ended) dropped is Warn, and one
// whose submit ctx ended, that Discard dropped or that Replace replaced is
// Debug. A failed HaltOnError task is reported as a *HaltError, at Error,
// whatever it is. A panic or Goexit has its own record already.
func (s *Scheduler[K]) report(sess *session[K], t *task) {
	err := t.job.failure()
	// A halt needs a session to halt: Discard ended t's while it ran.
	halted := halts(t) && !sess.discarded(t)
	if halted {
		s.halt(sess) // before the report: a handler finds the key paused, and may resume it
		err = &HaltError{Key: sess.key, Err: t.job.result()}
	}
	if err == nil {
		return
	}
	if s.errHandler != nil {
		ctx := s.beginCallback(sess, userHandler)
		s.errHandler(ctx, sess.key, err)
		s.endCallback(sess)
		return
	}
	if halted {
		s.log(sess, slog.LevelError, "seqsched: session halted", slog.Any("error", err))
		return
	}
	var level slog.Level
	switch t.outcome {
	case outcomePanicked:
		return
	case outcomeFailed:
		level = slog.LevelError
	case outcomeSkipped:
		level = slog.LevelDebug
		if err == ErrClosed { // the scheduler's own sentinel: the give-up dropped it
			level = slog.LevelWarn
		}
	default: // outcomeDiscarded, outcomeReplaced
		level = slog.LevelDebug
	}
	s.log(sess, level, "seqsched: posted task failed", slog.Any("error", err))
}

// logFailure records fn's panic (r, with its stack) or runtime.Goexit (r
// nil).
func (s *Scheduler[K]) logFailure(sess *session[K], t *task, r any, stack []byte) {
	if r == nil {
		s.log(sess, slog.LevelError, "seqsched: task called runtime.Goexit", slog.String("priority", t.prio.String()))
		return
	}
	s.log(sess, slog.LevelError, "seqsched: task panicked", slog.Any("panic", r), slog.String("stack", string(stack)))
}

// logCallback records a callback's panic (r, with its stack) or
// runtime.Goexit (r nil).
func (s *Scheduler[K]) logCallback(sess *session[K], panicked, goexited string, r any, stack []byte) {
	if r == nil {
		s.log(sess, slog.LevelError, goexited)
		return
	}
	s.log(sess, slog.LevelError, panicked, slog.Any("panic", r), slog.String("stack", string(stack)))
}

// logWeight records a weight out of range, once per scheduler.
func (s *Scheduler[K]) logWeight(sess *session[K], weight int) {
	if s.weightLogged.CompareAndSwap(false, true) {
		s.log(sess, slog.LevelError, "seqsched: WithWeight out of range; using weight 1 (logged once)",
			slog.Int("weight", weight), slog.Int("min", MinWeight), slog.Int("max", MaxWeight))
	}
}

// logSlow records a task that ran longer than WithSlowTask.
func (s *Scheduler[K]) logSlow(sess *session[K], t *task, d time.Duration) {
	s.log(sess, slog.LevelWarn, "seqsched: slow task", slog.String("priority", t.prio.String()), slog.Duration("duration", d))
}

// log stages a record about sess for its worker to write (writeLog).
func (s *Scheduler[K]) log(sess *session[K], level slog.Level, msg string, attrs ...slog.Attr) {
	sess.w.logs = append(sess.w.logs, record{level: level, msg: msg, attrs: append(attrs, slog.Any("session", sess.key))})
}

// writeLog writes the oldest staged record through the logger.
func (s *Scheduler[K]) writeLog(sess *session[K]) {
	w := &sess.w
	r := w.logs[0]
	w.logs[0] = record{}
	if w.logs = w.logs[1:]; len(w.logs) == 0 {
		w.logs = nil
	}
	l := s.opts.logger
	ctx := s.beginCallback(sess, userLogger)
	if l.Enabled(ctx, r.level) {
		l.LogAttrs(ctx, r.level, r.msg, r.attrs...)
	}
	s.endCallback(sess)
}

// beginCallback marks callback u as running on sess's worker and returns
// the ctx it is given: it identifies the worker to the waits while the
// callback runs (see callerOf).
func (s *Scheduler[K]) beginCallback(sess *session[K], u user) context.Context {
	c := &callbackCtx{Context: context.Background(), sess: &sess.base}
	c.active.Store(true)
	sess.w.cb = c
	s.userBegin(sess, u)
	return c
}

// endCallback ends what beginCallback began; the guard calls it too when
// the callback panicked or called runtime.Goexit.
func (s *Scheduler[K]) endCallback(sess *session[K]) {
	w := &sess.w
	if w.cb != nil {
		w.cb.active.Store(false)
		w.cb = nil
	}
	w.user = userNone
	s.userDone(sess)
}
