package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/seqsched/seqsched"
)

// Per-key control in the model test (issue 37): plans decoded with
// controls (see decodePlan) pause and resume keys (by key and through
// handles), submit tasks with HaltOnError, Replace(tag) and WaitForRoom,
// and may run under WithHighBurst and WithHaltOnError. What the checker
// holds them to, on top of the invariants of model_test.go:
//
//  9. no task of a paused key starts while it is paused: after Pause (by
//     key, or through a handle open on the key's session) returned nil,
//     at most the one task its worker was starting at that instant starts
//     before the next Resume (or an end of the key) is issued, and none
//     when the key's worker was asking the weight function for its turn
//     (a worker has no task in hand then: a task starts only when its
//     session's goroutine takes it, and a task queued to an idle key waits
//     in its queue, where Pause holds it); after a HaltOnError task
//     failed, none does;
//  10. each halt is reported once, as a *HaltError that names the key and
//     wraps ErrHalted and the task's error, to the error handler or the
//     log (Error), instead of a posted task's own report; Stats.Halts
//     counts the halts exactly;
//  11. a task resolves with ErrReplaced only if it was tagged, never ran,
//     and the next task of its key, priority and tag (in one session)
//     took its place, running where it would have run; a tagged task
//     still queued when the next one of its tag came is replaced;
//     Stats.Replaced and Outcomes.Replaced count the replaced exactly;
//  12. callers waiting for room in one lane get it in the order they came
//     (a waiter known in line runs before anything submitted after), a
//     WaitForRoom submit never returns ErrQueueFull, one whose ctx ends
//     while it waits returns ctx's error, and a task's (nested, or from
//     its fn's callback) to its own key never waits: it is accepted, or
//     refused with ErrWouldDeadlock;
//  13. under WithHighBurst(n), a Normal task waiting is picked after at
//     most n High ones in a row, and never before n ran;
//  14. once quiet, no session is paused (the plan resumed every key) and
//     none is paced.
//
// A paused key holds its tasks until it is resumed, and the final
// Shutdown would wait for them: once the plan's ops are done, endPlan
// resumes every key, and a halt reported after that is resumed by the
// error handler or the log that hears of it.

// roomProbe is the submit ctx of a WaitForRoom task: the scheduler reads
// its Done only when the caller has to wait (or once the task runs), so
// the first call tells the driver that the caller is in its lane's line,
// or accepted.
type roomProbe struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (c *roomProbe) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

// submitWaiting submits a WaitForRoom task on a goroutine of bg, and
// returns once its caller waits in line for room, or the submit returned:
// the driver goes on, and what it submits next comes after it.
func (r *run) submitWaiting(req subReq, probe *roomProbe, bg *sync.WaitGroup) {
	made := make(chan *rec, 1)
	req.made = made
	returned := make(chan struct{})
	bg.Go(func() {
		defer close(returned)
		r.submit(req)
	})
	rc := <-made
	select {
	case <-probe.asked:
	case <-returned:
	}
	r.mu.Lock()
	if rc.submitted == 0 {
		rc.inLine = r.tick()
	}
	r.mu.Unlock()
}

// control makes a Pause or Resume op's call, records it, and holds its
// result against what may come back.
func (r *run) control(o op) {
	var hd *hnd
	r.mu.Lock()
	if o.handle >= 0 {
		if hd = r.pickHandle(o.key, o.handle); hd == nil {
			r.mu.Unlock()
			return
		}
	}
	r.mu.Unlock()
	r.pauseCall(o.kind == opResume, o.key, hd, "driver")
}

// pauseCall calls Pause or Resume of key, or of handle hd when it is not
// nil, records the call, and checks what it returned.
func (r *run) pauseCall(resume bool, key int, hd *hnd, where string) {
	r.mu.Lock()
	ev := &pauseEv{resume: resume, key: key, handle: hd != nil, where: where,
		clean: hd == nil || !hd.closeIssued && !hd.killed && !r.ended[key]}
	ev.issue = r.tick()
	r.pauses = append(r.pauses, ev)
	wasClosing := r.closing
	r.mu.Unlock()
	var err error
	switch {
	case hd == nil && !resume:
		err = r.s.Pause(key)
	case hd == nil:
		err = r.s.Resume(key)
	case !resume:
		err = hd.h.Pause()
	default:
		err = hd.h.Resume()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ev.ret, ev.ok = r.tick(), err == nil
	name := "Pause"
	if resume {
		name = "Resume"
	}
	if hd != nil {
		name = "handle " + name
	}
	var se *seqsched.SessionError
	switch {
	case err == nil:
	case errors.Is(err, seqsched.ErrClosed) && !resume && (wasClosing || r.closing):
	case errors.As(err, &se) && errors.Is(err, seqsched.ErrSessionClosing) && hd != nil &&
		(hd.closeIssued || hd.killed || r.ended[key]):
		if se.Key != key {
			r.errs = append(r.errs, fmt.Sprintf("%s: %s(%d) = %v: the error names key %v", where, name, key, err, se.Key))
		}
	default:
		r.errs = append(r.errs, fmt.Sprintf("%s: %s(%d) = %v", where, name, key, err))
	}
}

// resumeHalted resumes key from a callback told of its halt once the plan
// is over (or always, when the layer's policy says so).
func (r *run) resumeHalted(key int, where string) {
	if key < 0 || key >= r.p.keys {
		return
	}
	if r.ending.Load() || r.p.layer != nil && r.p.layer.resumeOnHalt {
		r.pauseCall(true, key, nil, where)
	}
}

// endPlan resumes every key once the plan's ops are done, so that the
// final Shutdown finds every task free to run; ending is set first, so
// that a halt reported from now on is resumed where it is reported.
func (r *run) endPlan() {
	if !r.p.controls {
		return
	}
	r.ending.Store(true)
	for key := range r.p.keys {
		r.pauseCall(true, key, nil, "end of plan")
	}
}

// pausedSpan is a span of ticks in which a key is paused: from is when it
// is known paused (a Pause returned nil, a HaltOnError task ended
// failed), to when a Resume or an end of the key was first issued after
// (0: never). hand: how many tasks may still start in it (the one a
// worker was starting when Pause came), and accepted before which tick;
// issue: when the Pause was issued.
type pausedSpan struct {
	key, from, to int
	hand          int
	handBefore    int
	issue         int
	why           string
}

// endsPause returns the first tick after from at which a Resume or an end
// (Remove, Discard, a Close) of key was issued, 0 if none. A Resume still
// in flight at from (issued before, returned after) may have taken effect
// just after from: it ends the span at from itself, which leaves it empty.
// Called with r.mu held.
func (r *run) endsPause(key, from int) int {
	to := 0
	first := func(t int) {
		if t > from && (to == 0 || t < to) {
			to = t
		}
	}
	for _, ev := range r.pauses {
		switch {
		case ev.key != key || !ev.resume:
		case ev.issue > from:
			first(ev.issue)
		case ev.ret > from:
			to = from // in flight at from
		}
	}
	if to == from && to != 0 {
		return to
	}
	for _, ev := range r.ends {
		if ev.key == key {
			first(ev.issue)
		}
	}
	return to
}

// pausedSpans returns the spans in which the model knows a key paused
// (invariant 9). With loose, it adds every span in which the key may have
// been paused (any Pause, through any handle), for the checks that must
// leave those alone. Called with r.mu held.
func (r *run) pausedSpans(loose bool) []pausedSpan {
	var spans []pausedSpan
	for _, ev := range r.pauses {
		if ev.resume {
			continue
		}
		if !loose && (!ev.ok || !ev.clean || r.endedBetween(ev.key, ev.issue, ev.ret)) {
			continue
		}
		from := ev.ret
		if loose {
			from = ev.issue
		}
		spans = append(spans, pausedSpan{key: ev.key, from: from, to: r.endsPause(ev.key, ev.issue),
			hand: 1, handBefore: ev.ret, issue: ev.issue, why: fmt.Sprintf("%s paused it (returned at %d)", ev.where, ev.ret)})
	}
	for _, rc := range r.recs {
		if !rc.halted() || rc.end == 0 {
			continue
		}
		if !loose && r.endedBetween(rc.key, rc.submitBefore, rc.end) {
			continue // a closing session that halts with nothing queued is forgotten: its successor runs
		}
		spans = append(spans, pausedSpan{key: rc.key, from: rc.end, to: r.endsPause(rc.key, rc.end),
			why: fmt.Sprintf("task %d halted it (ended at %d)", rc.id, rc.end)})
	}
	return spans
}

// pausedDuring reports whether key may have been paused at some point
// between ticks from and to. Called with r.mu held.
func (r *run) pausedDuring(spans []pausedSpan, key, from, to int) bool {
	for _, sp := range spans {
		if sp.key == key && sp.from < to && (sp.to == 0 || sp.to > from) {
			return true
		}
	}
	return false
}

// checkPaused holds the trace against invariant 9. Called with r.mu held.
func (r *run) checkPaused(fail func(string, ...any)) {
	for _, sp := range r.pausedSpans(false) {
		var in []*rec
		for _, rc := range r.recs {
			if rc.key == sp.key && rc.start > sp.from && (sp.to == 0 || rc.start < sp.to) {
				in = append(in, rc)
			}
		}
		sort.Slice(in, func(i, j int) bool { return in[i].start < in[j].start })
		hand := sp.hand
		if hand > 0 && r.askingWeight(sp.key, sp.issue, sp.handBefore) {
			hand = 0 // its worker had no task in hand while Pause ran
		}
		for i, rc := range in {
			if i < hand && rc.submitBefore < sp.handBefore {
				continue // in its worker's hand when Pause came
			}
			fail("key %d: task %d started at %d while the key was paused: %s, and nothing resumed or ended the key until %d",
				sp.key, rc.id, rc.start, sp.why, sp.to)
		}
	}
}

// askingWeight reports whether a worker of key was in the weight function
// from before issue until after ret. Called with r.mu held.
func (r *run) askingWeight(key, issue, ret int) bool {
	for _, wc := range r.weightCalls {
		if wc.key == key && wc.enter < issue && (wc.leave == 0 || wc.leave > ret) {
			return true
		}
	}
	return false
}

// checkReplaced holds the tagged tasks against invariant 11, and gives
// each replacement that ran the place of the task it replaced first (see
// rec.from). It returns the replaced futures. Called with r.mu held.
func (r *run) checkReplaced(fail func(string, ...any)) map[*rec]bool {
	replaced := map[*rec]bool{}
	type group struct {
		key  int
		prio seqsched.Priority
		tag  string
	}
	groups := map[group][]*rec{}
	for _, rc := range r.recs {
		if rc.accepted && rc.tag != "" {
			g := group{rc.key, rc.prio, rc.tag}
			groups[g] = append(groups[g], rc)
		}
		if !rc.accepted || rc.posted || rc.starts > 0 || !isClosed(rc.h.done()) {
			continue
		}
		if _, err := rc.h.await(context.Background()); errors.Is(err, seqsched.ErrReplaced) {
			replaced[rc] = true
			if rc.tag == "" {
				fail("task %d, submitted without Replace, resolved with %v", rc.id, err)
			}
		}
	}
	spans := r.pausedSpans(false)
	for g, rcs := range groups {
		sort.Slice(rcs, func(i, j int) bool { return rcs[i].submitted < rcs[j].submitted })
		// Which task replaced which is known when the group's submits
		// did not overlap, and no posted task of it that never ran (which
		// may or may not have been replaced) has a successor in it.
		known := true
		for i, rc := range rcs {
			if i > 0 && rcs[i-1].submitted > rc.submitBefore || rc.posted && rc.starts == 0 && i < len(rcs)-1 {
				known = false
			}
		}
		if !known {
			for _, rc := range rcs {
				rc.noOrder = true
			}
			continue
		}
		head := make([]*rec, len(rcs)) // the task whose place each holds
		for i, rc := range rcs {
			head[i] = rc
			if i > 0 && replaced[rcs[i-1]] {
				head[i] = head[i-1]
			}
			if !replaced[rc] {
				continue
			}
			// (Which session the next one went to the epochs cannot
			// always say: an Open after any end of the key counts as a new
			// epoch, though it may find no session to wait behind.)
			if i == len(rcs)-1 {
				fail("key %d: task %d (%v, Replace(%q)) resolved with ErrReplaced, but the next task of its tag and priority in its session never came (tasks of the tag: %s)",
					g.key, rc.id, g.prio, g.tag, describeTagged(rcs, replaced))
			}
		}
		for i, rc := range rcs {
			if h := head[i]; h != rc {
				rc.placeFrom, rc.placeTo = h.from(), h.to()
			}
			if i == len(rcs)-1 || replaced[rc] || rc.starts == 0 {
				continue
			}
			// rc ran, so the next task of its tag was not accepted while
			// rc's place was still queued: say so where the trace shows it
			// was.
			next, h := rcs[i+1], head[i]
			if !sameEpoch(rc, next) || r.endedBetween(g.key, h.submitBefore, next.submitted) {
				continue
			}
			for _, z := range r.recs {
				// z ran before rc, in its session, from before next was
				// submitted until after it returned: rc was still queued.
				if z.key == g.key && z.start != 0 && z.start < next.submitBefore && z.end > next.submitted &&
					rc.start > z.start && sameEpoch(z, rc) {
					fail("key %d: task %d (%v, Replace(%q)) ran, though task %d of its tag was accepted (%d-%d) while task %d ran (%d-%d) and task %d was queued",
						g.key, rc.id, g.prio, g.tag, next.id, next.submitBefore, next.submitted, z.id, z.start, z.end, rc.id)
					break
				}
			}
			for _, sp := range spans {
				if sp.key == g.key && sp.from < h.submitBefore && (sp.to == 0 || sp.to > next.submitted) {
					fail("key %d: task %d (%v, Replace(%q)) ran, though task %d of its tag was accepted (%d-%d) while the key was paused (%s, until %d) and task %d was queued",
						g.key, rc.id, g.prio, g.tag, next.id, next.submitBefore, next.submitted, sp.why, sp.to, rc.id)
					break
				}
			}
		}
	}
	return replaced
}

// checkHalts holds the halts against invariant 10: one report per halt,
// by key and class of cause, to the error handler or (without one, unless
// a record was dropped) the log; Stats.Halts is checked with the other
// Stats. It returns how many halts there were. Called with r.mu held.
func (r *run) checkHalts(fail func(string, ...any)) (n, maybe uint64) {
	want := make([][nClasses]int, r.p.keys)
	more := make([][nClasses]int, r.p.keys) // halts that a Discard may have prevented
	for _, rc := range r.recs {
		switch {
		case rc.halted() && r.haltCut(rc):
			more[rc.key][rc.causeClass()]++
			maybe++
		case rc.halted():
			want[rc.key][rc.causeClass()]++
			n++
		}
	}
	got, what := r.haltsByCall, "error handler"
	if r.p.layer == nil || !r.p.layer.handler {
		if r.logDropped.Load() {
			return n, maybe
		}
		got, what = make([][nClasses]int, r.p.keys), "log"
		for _, lr := range r.logs {
			if lr.msg != haltMsg {
				continue
			}
			if c, ok := r.haltClass(lr.key, lr.err, fmt.Sprintf("log record %q", lr.msg), fail); ok {
				got[lr.key][c]++
			}
			if lr.level != haltLevel {
				fail("log: %q for key %d at %v; want %v", lr.msg, lr.key, lr.level, haltLevel)
			}
		}
	}
	for k := range r.p.keys {
		for c := range nClasses {
			if got[k][c] < want[k][c] || got[k][c] > want[k][c]+more[k][c] {
				fail("%s: key %d: halts reported by class of cause %v; want %v, plus up to %v that a Discard ended (classes %v)",
					what, k, got[k], want[k], more[k], classNames)
				break
			}
		}
	}
	return n, maybe
}

// haltCut reports whether rc, which failed with HaltOnError, may have had
// its session ended by Discard while it ran: a Discard of its key had not
// returned when it started. Such a task halts nothing if Discard came
// first (a halt needs a session to halt), and is then reported as a
// posted task's failure. Called with r.mu held.
func (r *run) haltCut(rc *rec) bool {
	for _, ev := range r.ends {
		if ev.key == rc.key && (ev.kind == endDiscard || ev.kind == endDiscardHandle) && (ev.ret == 0 || ev.ret > rc.start) {
			return true
		}
	}
	return false
}

// haltClass checks err, reported for key as a halt, and returns the class
// of its cause. Called with r.mu held.
func (r *run) haltClass(key int, err error, where string, fail func(string, ...any)) (int, bool) {
	var he *seqsched.HaltError
	switch {
	case !errors.As(err, &he):
		fail("%s: %v is not a *HaltError", where, err)
	case !errors.Is(err, seqsched.ErrHalted):
		fail("%s: %v does not wrap ErrHalted", where, err)
	case he.Key != key || key < 0 || key >= r.p.keys:
		fail("%s: HaltError.Key = %v; want %d", where, he.Key, key)
	case he.Err == nil || !errors.Is(err, he.Err):
		fail("%s: %v does not wrap its cause %v", where, err, he.Err)
	default:
		return classOf(he.Err), true
	}
	return 0, false
}

// checkHighBurst holds the trace of key's started tasks (rcs, in start
// order) against invariant 13 under WithHighBurst(n). The picks the
// trace does not show (tasks skipped when picked) and a park (a pause
// restarts the count) leave a run alone. Called with r.mu held.
func (r *run) checkHighBurst(key int, rcs []*rec, loose []pausedSpan, fail func(string, ...any)) {
	n := r.p.highBurst
	unseen := [2]bool{} // a task of the key, by priority, that never ran
	for _, rc := range r.recs {
		if rc.key == key && rc.accepted && rc.starts == 0 {
			unseen[rc.prio] = true
		}
	}
	for i, x := range rcs {
		// A Normal task picked while a High one waited: n High ones ran
		// before it, in a row.
		if x.prio != seqsched.Normal || i == 0 || unseen[seqsched.High] || x.noOrder {
			continue
		}
		prevEnd := rcs[i-1].end
		for _, y := range rcs[i+1:] {
			if y.prio != seqsched.High || y.noOrder || !sameEpoch(x, y) || y.to() >= prevEnd {
				continue
			}
			// Counted whatever their epoch: a successor's count starts
			// afresh, so this errs towards allowing the pick.
			highs := 0
			for j := i - 1; j >= 0 && rcs[j].prio == seqsched.High; j-- {
				highs++
			}
			if highs < n {
				fail("key %d: Normal task %d was picked after %d High tasks in a row while High task %d (accepted at %d) waited; WithHighBurst(%d); trace:\n%s",
					key, x.id, highs, y.id, y.to(), n, r.dump(rcs))
			}
			break
		}
	}
	if unseen[seqsched.Normal] {
		return
	}
	for i := n; i < len(rcs); i++ {
		// The n+1st High task in a row, picked while a Normal one waited.
		run := rcs[i-n : i+1]
		ok := true
		for _, h := range run {
			if h.prio != seqsched.High || h.noOrder || !sameEpoch(h, run[0]) {
				ok = false
				break
			}
		}
		if !ok || r.endedBetween(key, run[0].submitBefore, run[n].start) ||
			r.pausedDuring(loose, key, run[0].submitBefore, run[n].start) || r.resumedDuring(key, run[0].submitBefore, run[n].start) {
			continue
		}
		// z was queued once run[0] ended, so the session did not retire
		// (which restarts the count) before run[n] was picked.
		for _, z := range rcs[i+1:] {
			if z.prio == seqsched.Normal && !z.noOrder && sameEpoch(z, run[0]) && z.to() < run[0].end {
				fail("key %d: High task %d was the %d-th High task picked in a row while Normal task %d (accepted at %d) waited; WithHighBurst(%d)",
					key, run[n].id, n+1, z.id, z.to(), n)
				break
			}
		}
	}
}

// resumedDuring reports whether a Resume of key was under way at some
// point between ticks from and to. Called with r.mu held.
func (r *run) resumedDuring(key, from, to int) bool {
	for _, ev := range r.pauses {
		if ev.key == key && ev.resume && ev.issue < to && (ev.ret == 0 || ev.ret > from) {
			return true
		}
	}
	return false
}

// A halt's log record, as the core writes it without an error handler.
const (
	haltMsg   = "seqsched: session halted"
	haltLevel = slog.LevelError
)

// describeTagged lists tasks of one tag, for failure messages.
func describeTagged(rcs []*rec, replaced map[*rec]bool) string {
	var b strings.Builder
	for _, rc := range rcs {
		fmt.Fprintf(&b, "\n  task %d: submitted %d-%d epoch %d-%d post %v started %d replaced %v",
			rc.id, rc.submitBefore, rc.submitted, rc.epochBefore, rc.epochAfter, rc.posted, rc.start, replaced[rc])
	}
	return b.String()
}

// controlReached counts, over every plan of the test binary, what per-key
// control did (see TestModel's log): that the generator reaches it.
var controlReached struct {
	pauses, resumes, halts, replaced, inLine, waitCanceled, waitRefused, selfWaits, selfWaitRefused, pausedSpans, highBurstPlans atomic.Int64
}

// countControl adds what plan r did to controlReached. Called with r.mu
// held, once the run is checked.
func (r *run) countControl(st seqsched.Stats) {
	c := &controlReached
	for _, ev := range r.pauses {
		if ev.ok && !ev.resume {
			c.pauses.Add(1)
		} else if ev.ok && ev.where == "driver" {
			c.resumes.Add(1)
		}
	}
	c.halts.Add(int64(st.Halts))
	c.replaced.Add(int64(st.Replaced))
	for _, rc := range r.recs {
		switch {
		case rc.inLine != 0:
			c.inLine.Add(1)
		}
		if rc.wait && rc.nested {
			c.selfWaits.Add(1)
		}
		if rc.wait && errors.Is(rc.rejected, seqsched.ErrWouldDeadlock) {
			c.selfWaitRefused.Add(1)
		}
		if rc.wait && errors.Is(rc.rejected, context.Canceled) {
			c.waitCanceled.Add(1)
		}
		var se *seqsched.SessionError
		if rc.wait && (errors.Is(rc.rejected, seqsched.ErrClosed) || errors.As(rc.rejected, &se)) && rc.inLine != 0 {
			c.waitRefused.Add(1)
		}
	}
	c.pausedSpans.Add(int64(len(r.pausedSpans(false))))
	if r.p.highBurst > 0 {
		c.highBurstPlans.Add(1)
	}
}

// controlReport describes controlReached.
func controlReport() string {
	c := &controlReached
	return fmt.Sprintf("pauses=%d resumes(driver)=%d paused spans checked=%d halts=%d replaced=%d waiters in line=%d (canceled %d, refused %d) tasks waiting for room in their own session=%d (ErrWouldDeadlock %d) WithHighBurst plans=%d",
		c.pauses.Load(), c.resumes.Load(), c.pausedSpans.Load(), c.halts.Load(), c.replaced.Load(), c.inLine.Load(),
		c.waitCanceled.Load(), c.waitRefused.Load(), c.selfWaits.Load(), c.selfWaitRefused.Load(), c.highBurstPlans.Load())
}
