package seqsched

import (
	"fmt"
	"log/slog"
	"math"
	"time"
)

// WithRate paces keys: f gives each key's rate, in tasks per second, and
// burst, and a session starts its next task only when its token bucket has
// a token, as golang.org/x/time/rate's Limiter.Wait would let it: the
// bucket holds up to burst tokens, starts full, and refills at perSecond.
// A paced session that has to wait holds no goroutine and no slot: it
// waits on one timer (at most one per paced session that has work), and
// other keys are never delayed by it. Tasks are never dropped: pacing
// only spaces their starts. High tasks are paced like Normal ones.
//
// f is called on the session's goroutine when the session first runs (and
// again if its record was forgotten as idle and made anew, which starts
// with a full bucket, as a long-idle Limiter would be). A perSecond of 0
// or +Inf leaves the key unpaced. A value out of range (perSecond negative
// or NaN, or burst < 1 for a paced key) is logged once per scheduler, and
// the key is unpaced; a panic or runtime.Goexit in f likewise. A rate so
// small that a task's wait would not fit in a time.Duration (below about
// 1.1e-10 per second) waits as long as one holds (about 292 years). f
// follows the callback rules of [WithErrorHandler], except that it is
// given no ctx: it must not wait on the scheduler (Await, Remove,
// Discard, Close, Shutdown), as [WithWeight]'s function must not; it
// should be a quick lookup.
//
// Differences from x/time/rate: the bucket is per key and made on the
// session's first run; a task's token is taken when it is next to start,
// and a token taken for a task that is then dropped (Discard, Close) is
// not given back. The clock is read once per task of a paced key only.
// Its key type must be the scheduler's: New returns an [*OptionError]
// otherwise.
func WithRate[K comparable](f func(key K) (perSecond float64, burst int)) Option {
	return &rateOption{f}
}

type rateOption struct{ fn any }

func (o *rateOption) apply(opts *options) { opts.rate = o.fn }
func (o *rateOption) String() string      { return fmt.Sprintf("WithRate(%T)", o.fn) }

// tokenBucket is a paced session's token bucket, touched only by the goroutine
// that runs the session (it lives in the worker).
type tokenBucket struct {
	perSecond float64
	burst     float64
	tokens    float64
	last      time.Time
	reserved  bool // a token is taken for the next task: it may start
}

// reserve takes a token for the next task at now, and returns how long
// the task must wait for it (0: it may start now). As Reserve does, it
// takes the token even when it has to wait, so tokens may go below zero.
func (b *tokenBucket) reserve(now time.Time) time.Duration {
	if !b.last.IsZero() {
		b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.perSecond)
	}
	b.last = now
	b.tokens--
	b.reserved = true
	if b.tokens >= 0 {
		return 0
	}
	// A rate so small that the wait overflows a Duration (below about
	// 1.1e-10 per second for one token) waits as long as a Duration can.
	ns := math.Ceil(-b.tokens / b.perSecond * float64(time.Second))
	if ns >= maxWait {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}

// maxWait is the longest wait, in ns, that a time.Duration holds: 2^63,
// the first float64 above math.MaxInt64.
const maxWait = float64(1 << 63)

// unreserve gives back the token reserve took for the next task, which
// has not started: a paced session that Pause parks waits its turn again
// once resumed.
func (b *tokenBucket) unreserve() {
	if b.reserved {
		b.tokens++
		b.reserved = false
	}
}

// readRate reads sess's rate from the WithRate function, once per session
// record: user code, run on the session's goroutine under its guard.
func (s *Scheduler[K]) readRate(sess *session[K]) {
	w := &sess.w
	w.rateRead = true
	w.user = userRate
	perSecond, burst := s.rate(sess.key)
	w.user = userNone
	switch {
	case perSecond == 0 || math.IsInf(perSecond, 1):
		return
	case perSecond < 0 || math.IsNaN(perSecond) || burst < 1:
		if s.rateLogged.CompareAndSwap(false, true) {
			s.log(sess, slog.LevelError, "seqsched: WithRate out of range; key not paced (logged once)",
				slog.Float64("perSecond", perSecond), slog.Int("burst", burst))
		}
		return
	}
	w.pace = &tokenBucket{perSecond: perSecond, burst: float64(burst), tokens: float64(burst)}
}

// paceNext takes a token for the next task of paced sess, unless one is
// taken already; if the task must wait for it, sess moves to paced, where
// it waits on one timer, which schedules it again, and paceNext reports
// true. Called with sh.mu held, by sess's worker, with tasks queued.
func (s *Scheduler[K]) paceNext(sh *shard[K], sess *session[K]) bool {
	b := sess.w.pace
	if b.reserved {
		return false
	}
	d := b.reserve(time.Now())
	if d <= 0 {
		return false
	}
	s.fire(sh, sess, evPace)
	pt := new(paceTimer) // this wait's identity: a stale callback finds another
	pt.t = time.AfterFunc(d, func() { s.paced(sess, pt) })
	sess.w.timer = pt // the callback reads it under sh.mu: set before it can look
	return true
}

// paceTimer is one wait of a paced session; its callback acts only while
// it is the session's current one.
type paceTimer struct{ t *time.Timer }

// paced is the timer's callback: if sess still waits on pt, it is
// scheduled again, and this goroutine runs it if it needs one. It runs no
// user code before work's guard.
func (s *Scheduler[K]) paced(sess *session[K], pt *paceTimer) {
	sh := sess.sh
	sh.mu.Lock()
	if sess.state != statePaced || sess.w.timer != pt {
		sh.mu.Unlock() // dropped meanwhile (see dropWaiting)
		return
	}
	sess.w.timer = nil
	start := s.rq.schedule(sh, sess) // this goroutine runs it: its token passes to it
	s.unlock(sh)
	if start {
		s.work(sess)
	}
}

// unpace stops the timer of paced sess, whose tasks were dropped. Called
// with sh.mu held.
func (sess *session[K]) unpace() {
	if pt := sess.w.timer; pt != nil {
		pt.t.Stop() // if it fired, paced finds it no longer current
		sess.w.timer = nil
	}
}
