package seqsched

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// turn is the state of a session's turn on a worker goroutine.
type turn struct {
	n     int       // tasks run in this turn
	limit int       // tasks the turn may run: yieldAfter × weight
	start time.Time // when it began; only with WithYieldInterval
}

func (s *Scheduler[K]) startTurn(tn *turn, sess *session[K]) {
	tn.n, tn.limit = 0, s.opts.yieldAfter
	if s.weight != nil {
		tn.limit *= s.weightOf(sess.key)
	}
	if s.opts.yieldInterval > 0 {
		tn.start = time.Now()
	}
}

// turnOver reports whether the turn has run its count of tasks or, with
// WithYieldInterval, its time (after at least one task).
func (s *Scheduler[K]) turnOver(tn *turn) bool {
	if tn.n >= tn.limit {
		return true
	}
	return s.opts.yieldInterval > 0 && tn.n > 0 && time.Since(tn.start) >= s.opts.yieldInterval
}

// weightOf calls the WithWeight function. A weight out of range, or a panic,
// is logged once per scheduler and counts as 1.
func (s *Scheduler[K]) weightOf(key K) (w int) {
	defer func() {
		if r := recover(); r != nil {
			s.badWeight(key, fmt.Sprintf("panic: %v", r))
			w = 1
		}
	}()
	w = s.weight(key)
	if w < MinWeight || w > MaxWeight {
		s.badWeight(key, fmt.Sprintf("weight %d out of range %d..%d", w, MinWeight, MaxWeight))
		return 1
	}
	return w
}

func (s *Scheduler[K]) badWeight(key K, why string) {
	if s.weightLogged.CompareAndSwap(false, true) {
		s.log(slog.LevelError, "seqsched: WithWeight: "+why+"; using weight 1 (logged once)", key)
	}
}

// skip fails t instead of starting it, and reports true, when Shutdown gave
// up or t's submit ctx ended before t could start. The submit ctx's Err is
// the submitter's code: a panic there fails t with a *PanicError, and a
// runtime.Goexit with ErrGoexit (the worker's takeOver then goes on).
func (s *Scheduler[K]) skip(t *task) (skipped bool) {
	if s.forced.Load() {
		t.job.fail(ErrClosed) // no task starts after Shutdown gave up
		t.job.report()
		return true
	}
	normal := false
	defer func() {
		if normal {
			return
		}
		if r := recover(); r != nil {
			t.job.fail(&PanicError{Value: r, Stack: debug.Stack()})
			skipped = true
			return
		}
		t.job.fail(ErrGoexit)
	}()
	err := t.parent.Err()
	normal = true
	if err != nil {
		t.job.fail(err)
		t.job.report()
		return true
	}
	return false
}

// run starts task t of sess on the calling goroutine, sets *ran once fn has
// returned, and does the bookkeeping its options ask for.
func (s *Scheduler[K]) run(sess *session[K], t *task, ran *bool) {
	var start time.Time
	if s.opts.slowTask > 0 || s.hist != nil {
		start = time.Now()
		if s.hist != nil {
			s.hist[t.prio].record(time.Duration(start.Sub(s.epoch).Nanoseconds() - t.at))
		}
	}
	perr := t.job.exec()
	*ran = true
	if ls := t.lentSlot(); ls != nil {
		s.settle(ls) // before the logs: the logger is user code too
	}
	if perr != nil {
		s.panics.Add(1)
		s.log(slog.LevelError, "seqsched: task panicked", sess.key, slog.Any("panic", perr.Value), slog.String("stack", string(perr.Stack)))
	}
	t.job.report()
	if s.opts.slowTask > 0 {
		if d := time.Since(start); d > s.opts.slowTask {
			s.slowTasks.Add(1)
			s.log(slog.LevelWarn, "seqsched: slow task", sess.key, slog.String("priority", t.prio.String()), slog.Duration("duration", d))
		}
	}
}
