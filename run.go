package seqsched

import (
	"context"
	"time"
)

// How a worker runs one task: it skips it or runs fn, settles its slot and
// times, and reports a posted task's failure; and the reporter, a worker
// that reports the failures of posted tasks dropped without running.

// start decides whether w.t runs: not once Shutdown gave up, nor when its
// submit ctx ended (that ctx's Err is user code).
func (w *worker[K]) start() {
	t := w.t
	w.next, w.logs.after = stepReport, stepAdvance
	if w.s.forced.Load() {
		t.job.settle(ErrClosed, outcomeSkipped) // no task starts after Shutdown gave up
		return
	}
	if a := t.aux.Load(); a != nil && a.discarded.Load() {
		t.job.settle(ErrDiscarded, outcomeDiscarded) // taken off the queue just before Discard
		return
	}
	var err error
	var perr *PanicError
	if p := t.parent; p != context.Background() && p != context.TODO() { // package context's own: not user code
		w.goexit = outcomeSkipped // staged: a Goexit in Err skips the task (see goroutine)
		w.logs.set(logCtxGoexit)
		err, perr = call(w, siteSubmitCtx, callErr, p)
		w.logs.clear(logCtxGoexit)
		w.goexit = outcomeNone
	}
	switch {
	case perr != nil:
		t.job.settle(perr, outcomeSkipped)
		w.logs.perr = perr
		w.logs.set(logCtxPanic)
	case err != nil:
		t.job.settle(err, outcomeSkipped)
	default:
		w.runTask() // the steps a Goexit would resume at, run in line
	}
}

// runTask runs w.t's fn (user code).
func (w *worker[K]) runTask() {
	s, t := w.s, w.t
	if s.opts.slowTask > 0 || s.hist != nil || s.runHist != nil {
		w.began = time.Now()
		if s.hist != nil {
			wait := time.Duration(w.began.Sub(s.epoch).Nanoseconds() - t.at)
			s.hist[t.prio].record(wait)
			s.waitHist[t.prio].Observe(wait)
		}
	}
	w.tn.n++ // counted before fn runs: a Goexit still uses up the turn
	w.next = stepAfter
	w.goexit = outcomePanicked // staged: a Goexit in fn fails the task (see goroutine)
	w.logs.set(logGoexit)
	_, perr := call(w, siteFn, execJob, t)
	w.logs.clear(logGoexit)
	w.goexit = outcomeNone
	if perr != nil {
		t.job.settle(perr, outcomePanicked)
		w.logs.perr = perr
		w.logs.set(logPanic)
	}
	w.after()
	w.report()
}

func execJob(t *task) struct{} { t.job.exec(t); return struct{}{} }

// after is the bookkeeping once fn returned or called Goexit: the task's
// slot, taken back if an Await still has it lent, and its run time.
func (w *worker[K]) after() {
	s, t := w.s, w.t
	w.next = stepReport
	if ls := t.lentSlot(); ls != nil {
		s.settle(ls)
	}
	if w.began.IsZero() {
		return
	}
	d := time.Since(w.began)
	w.began = time.Time{}
	if s.runHist != nil {
		s.runHist[t.prio].Observe(d)
	}
	if s.opts.slowTask > 0 && d > s.opts.slowTask {
		s.slowTasks.Add(1)
		w.logs.dur, w.logs.prio = d, t.prio
		w.logs.set(logSlow)
	}
}

// report hands w.t's failure, if it is a posted task's, to the error
// handler (user code); without one, to the log.
func (w *worker[K]) report() {
	w.next = stepLog
	w.reportTask(w.t)
	if w.logs.pending == 0 && w.next == stepLog {
		w.next = w.logs.after // nothing to write: skip the step
		if w.logs.keyed {
			w.logs.written() // a reported Post's key must not name the next record
		}
	}
}

// reportTask reports t's failure, if it is a posted task with one. A
// handler's Goexit is staged as a log, and the caller's next step stands.
func (w *worker[K]) reportTask(t *task) {
	p, ok := t.job.(*posted[K])
	if !ok || p.err == nil {
		return
	}
	s := w.s
	w.logs.key, w.logs.keyed = p.key, true
	if s.errHandler == nil {
		if t.outcome != outcomePanicked { // a panic or Goexit is logged with its own record
			w.logs.failed = p.err
			w.logs.set(logPostFailed)
		}
		return
	}
	w.logs.set(logHandlerGoexit) // staged
	_, perr := callback(w, siteHandler, callHandler[K], handlerCall[K]{fn: s.errHandler, key: p.key, err: p.err})
	w.logs.clear(logHandlerGoexit)
	if perr != nil {
		w.logs.handlerPanic = perr
		w.logs.set(logHandlerPanic)
	}
}

type handlerCall[K comparable] struct {
	fn  func(K, error)
	key K
	err error
}

func callHandler[K comparable](c handlerCall[K]) struct{} { c.fn(c.key, c.err); return struct{}{} }

// startReporter starts a reporter for dropped, with the live token the
// caller took for it under the lock that made its work (see
// Scheduler.live); tasks a forced Shutdown or
// Discard resolved without running; their failures are reported on it, and
// each drain in drains (with its shard) waits for it. Its live token is
// taken here.
func (s *Scheduler[K]) startReporter(dropped []*task, drains []*drain, dshards []*shard[K]) {
	w := s.worker(stepReporter)
	w.dropped = append(w.dropped, dropped...)
	w.drains = append(w.drains, drains...)
	w.dshards = append(w.dshards, dshards...)
	go w.run()
}

// reportDropped reports the failure of the next of w.dropped, then, once
// all are reported, settles the drains that waited for the reporter.
func (w *worker[K]) reportDropped() {
	if w.i < len(w.dropped) {
		t := w.dropped[w.i]
		w.i++
		w.next, w.logs.after = stepLog, stepReporter // a Goexit goes on with the next
		w.reportTask(t)
		return
	}
	for i, d := range w.drains {
		sh := w.dshards[i]
		sh.mu.Lock()
		ended := d.settle()
		sh.mu.Unlock()
		ended.end()
	}
	w.next = stepExit
}
