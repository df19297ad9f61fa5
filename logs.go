package seqsched

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// What workers log, and how: records are staged as bits and written one
// at a time through the logger, user code (see callsite.go).

// The records a worker writes, staged as bits in logs.pending and written
// by writeLogs one at a time (each bit cleared before its record is
// written, so that a Goexit in the logger drops that record only).
type logKind uint16

const (
	logPanic         logKind = 1 << iota // fn panicked
	logGoexit                            // fn called runtime.Goexit
	logCtxPanic                          // the submit ctx's Err panicked
	logCtxGoexit                         // the submit ctx's Err called runtime.Goexit
	logPostFailed                        // a posted task failed and there is no error handler
	logHandlerPanic                      // the error handler panicked
	logHandlerGoexit                     // the error handler called runtime.Goexit
	logSlow                              // the task ran longer than WithSlowTask
	logWeight                            // WithWeight's function failed (once per scheduler)
)

type logs[K comparable] struct {
	pending      logKind
	key          K // the session the records are about, when keyed (a posted task's); else w.sess's
	keyed        bool
	after        step // where writeLogs goes on
	perr         *PanicError
	handlerPanic *PanicError
	failed       error
	prio         Priority // of the slow task
	dur          time.Duration
	weightWhy    string
}

func (l *logs[K]) set(k logKind) { l.pending |= k }

func (l *logs[K]) clear(k logKind) { l.pending &^= k }

// writeLogs writes the staged records, then goes on to logs.after.
func (w *worker[K]) writeLogs() {
	for w.logs.pending != 0 {
		k := w.logs.pending & -w.logs.pending // the lowest bit
		w.logs.pending &^= k
		w.writeLog(k)
	}
	w.next = w.logs.after
	w.logs.written()
}

// written forgets what the records staged so far were about, once they are
// written or there were none: the errors (let go of them) and the key, so
// that no later record of the worker, for another session, names it.
func (l *logs[K]) written() {
	l.perr, l.handlerPanic, l.failed = nil, nil, nil
	if l.keyed {
		var zero K
		l.key, l.keyed = zero, false
	}
}

func (w *worker[K]) writeLog(k logKind) {
	s, key := w.s, w.logs.key
	if !w.logs.keyed && w.sess != nil {
		key = w.sess.key // the session the worker runs, which the records are about
	}
	switch k {
	case logPanic:
		w.log(slog.LevelError, "seqsched: task panicked", key, slog.Any("panic", w.logs.perr.Value),
			slog.String("stack", string(w.logs.perr.Stack)))
	case logGoexit:
		w.log(slog.LevelError, "seqsched: task called runtime.Goexit", key)
	case logCtxPanic:
		w.log(slog.LevelError, "seqsched: a submit ctx's Err panicked; the task did not run", key,
			slog.Any("panic", w.logs.perr.Value), slog.String("stack", string(w.logs.perr.Stack)))
	case logCtxGoexit:
		w.log(slog.LevelError, "seqsched: a submit ctx's Err called runtime.Goexit; the task did not run", key)
	case logPostFailed:
		level := postLevel(w.logs.failed)
		w.log(level, "seqsched: posted task failed", key, slog.Any("error", w.logs.failed))
	case logHandlerPanic:
		w.log(slog.LevelError, "seqsched: WithErrorHandler panicked", key,
			slog.Any("panic", w.logs.handlerPanic.Value), slog.String("stack", string(w.logs.handlerPanic.Stack)))
	case logHandlerGoexit:
		w.log(slog.LevelError, "seqsched: WithErrorHandler called runtime.Goexit", key)
	case logSlow:
		w.log(slog.LevelWarn, "seqsched: slow task", key, slog.String("priority", w.logs.prio.String()),
			slog.Duration("duration", w.logs.dur))
	case logWeight:
		if s.weightLogged.CompareAndSwap(false, true) {
			w.log(slog.LevelError, "seqsched: WithWeight: "+w.logs.weightWhy+"; using weight 1 (logged once)", key)
		}
	}
}

// postLevel is the level of the record about a posted task's failure when
// there is no error handler: a task that did not run because the ctx its
// submitter passed ended, or because it was discarded, is what a server
// expects when a client goes away (Debug); one a forced Shutdown dropped
// is Warn; anything else, fn's own error, is Error.
func postLevel(err error) slog.Level {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrDiscarded):
		return slog.LevelDebug
	case errors.Is(err, ErrClosed):
		return slog.LevelWarn
	}
	return slog.LevelError
}

// log writes one record about session key through the logger (user code).
func (w *worker[K]) log(level slog.Level, msg string, key K, attrs ...slog.Attr) {
	callback(w, siteLogger, callLog, logCall{l: w.s.opts.logger, level: level, msg: msg, attrs: append(attrs, slog.Any("session", key))})
}

type logCall struct {
	l     *slog.Logger
	level slog.Level
	msg   string
	attrs []slog.Attr
}

func callLog(c logCall) struct{} {
	ctx := context.Background()
	if c.l.Enabled(ctx, c.level) {
		c.l.LogAttrs(ctx, c.level, c.msg, c.attrs...)
	}
	return struct{}{}
}
