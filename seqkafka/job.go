package seqkafka

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A job carries one record from its key's turn to its end: done (handled,
// or dead-lettered), or given back (its ctx ended first, so it stays not
// done and no commit passes it). It runs as a task of the record's key's
// session, so the key's next record waits for it.
//
// It is a small state machine: each step calls at most one user function,
// and before the call sets the step that follows to what a runtime.Goexit
// in that function means. A Goexit cannot be stopped (see call), but the
// goroutine runs its deferred calls first: takeOver then runs the steps
// left from where the job stands, before the key's next record may start.
//
//	gate ──► handle ──► done
//	  ▲        │
//	  │        ▼
//	wait ◄─ backoff ◄── failed ──► deadLetter ──► done
//	                      │          │    ▲
//	                      │          ▼    │
//	                      │       dlFailed ──► dlBackoff ──► dlWait
//	                      ▼
//	                  giveBack (ctx ended; also from gate and the waits)
//
// A backoff (or dlBackoff) whose function panics or calls Goexit goes
// through backoffFailed, which logs it, to its wait with DefaultBackoff's.
type job struct {
	c       *Consumer
	p       *partition
	r       *kgo.Record
	sk      sessionKey
	taken   time.Duration // when the poll loop took the record (Consumer.clock), for the queue time
	step    step          // what the job does next
	attempt int           // attempts made
	err     error         // the last attempt's error
	dlErr   error         // the dead-letter function's last error
	dlFails int           // its failures so far
	wait    time.Duration // of the wait step to come
	bErr    error         // the backoff function's failure (stepBackoffFailed)
	bNext   step          // the wait that follows it
	settled bool          // the record's end is recorded in its partition
	first   callCtx       // the ctx of the first attempt's call, set once (later attempts get their own)
}

type step uint8

const (
	stepGate          step = iota // wait out a Pause, then handle
	stepHandle                    // call the handler: the next attempt
	stepFailed                    // attempt failed with err: retry, dead-letter or give back
	stepBackoff                   // ask the backoff for the wait before the next attempt
	stepWait                      // wait, then gate
	stepDeadLetter                // call the dead-letter function with err
	stepDLFailed                  // it failed with dlErr
	stepDLBackoff                 // ask the backoff for the wait before calling it again
	stepDLWait                    // wait, then call it again
	stepBackoffFailed             // the backoff function failed: log, then wait DefaultBackoff's
	stepDone                      // handled or dead-lettered
	stepGiveBack                  // ctx ended: left not done
)

// run is the job's task.
func (j *job) run(ctx context.Context) error {
	defer j.takeOver(ctx)
	j.steps(ctx)
	return nil
}

// takeOver runs, deferred, when run ends. After a normal end it does
// nothing. On a goroutine that runtime.Goexit is unwinding (a user
// function called it) it runs the job's remaining steps here, so the record
// still ends before its key's next one starts; it defers itself again in
// case a user function calls Goexit here too (each call that can is a step,
// so this nests at most once per step the job takes).
func (j *job) takeOver(ctx context.Context) {
	if j.settled {
		return
	}
	defer j.takeOver(ctx)
	j.steps(ctx)
}

func (j *job) steps(ctx context.Context) {
	for !j.settled {
		switch j.step {
		case stepGate:
			j.gate(ctx)
		case stepHandle:
			j.handle(ctx)
		case stepFailed:
			j.failed(ctx)
		case stepBackoff:
			j.backoff(ctx)
		case stepWait:
			j.sleep(ctx, stepGate)
		case stepDeadLetter:
			j.deadLetter(ctx)
		case stepDLFailed:
			j.deadLetterFailed(ctx)
		case stepDLBackoff:
			j.deadLetterBackoff(ctx)
		case stepDLWait:
			j.sleep(ctx, stepDeadLetter)
		case stepBackoffFailed:
			j.step = j.bNext
			j.c.log(ctx, slog.LevelError, "seqkafka: backoff function failed; DefaultBackoff used",
				append(j.logArgs(), "err", j.bErr)...)
		default:
			j.settle()
		}
	}
}

// gate holds the record while the consumer is paused (see Consumer.Pause).
func (j *job) gate(ctx context.Context) {
	j.step = stepHandle
	if !j.c.waitResumed(ctx, j.p) {
		j.step = stepGiveBack
	}
}

// handle makes the next attempt: the handler's call, or a batch's.
func (j *job) handle(ctx context.Context) {
	// No ctx check here: a task whose ctx ended does not start, and every
	// step that waits (gate, sleep) gives the record back when it ends.
	j.attempt++
	j.step = stepFailed // what a Goexit in the handler means; call sets err
	if j.c.batchHandler != nil {
		var ok bool
		if j.err, ok = j.c.batchAttempt(ctx, j); !ok {
			j.step = stepGiveBack
			return
		}
	} else {
		j.c.callHandler(ctx, j)
	}
	if j.err == nil {
		j.step = stepDone
		j.p.counts.processed.Add(1)
	}
}

// failed decides what follows a failed attempt.
func (j *job) failed(ctx context.Context) {
	switch {
	case ctx.Err() != nil:
		j.step = stepGiveBack
	case j.attempt >= j.c.cfg.attempts || errors.Is(j.err, ErrTerminal):
		j.step = stepDeadLetter
	default:
		j.step = stepBackoff
		j.p.counts.retries.Add(1)
	}
	if errors.Is(j.err, seqsched.ErrGoexit) {
		j.c.log(ctx, slog.LevelError, "seqkafka: runtime.Goexit counted as a failed attempt",
			append(j.logArgs(), "attempt", j.attempt, "err", j.err)...)
	}
}

// backoff asks for the wait before the next attempt.
func (j *job) backoff(ctx context.Context) {
	j.askBackoff(ctx, j.attempt, j.err, stepWait)
}

// askBackoff sets the wait before next from the backoff function, asked
// about attempt and err. A backoff that panics or calls Goexit is logged
// (stepBackoffFailed) and DefaultBackoff gives the wait.
func (j *job) askBackoff(ctx context.Context, attempt int, err error, next step) {
	j.wait = DefaultBackoff(ctx, j.r, attempt, err)
	j.step, j.bNext, j.bErr = stepBackoffFailed, next, goexitErrs[siteBackoff] // what a Goexit means
	var d time.Duration
	var ferr error
	call(siteBackoff, &ferr, func() error {
		d = j.c.cfg.backoff(&callCtx{Context: ctx, c: j.c, attempt: j.attempt}, j.r, attempt, err)
		return nil
	})
	if ferr != nil {
		j.bErr = ferr
		return
	}
	j.wait, j.step, j.bErr = d, next, nil
}

// sleep waits j.wait on the record's key, lending its slot (see
// Consumer.sleep), then goes on to next.
func (j *job) sleep(ctx context.Context, next step) {
	j.step = next
	if !j.c.sleep(ctx, j.sk, j.wait) {
		j.step = stepGiveBack
	}
}

// deadLetter hands the record to the dead-letter function.
func (j *job) deadLetter(ctx context.Context) {
	if ctx.Err() != nil {
		j.step = stepGiveBack
		return
	}
	// What a Goexit in the dead-letter function means: a failure.
	j.step, j.dlErr = stepDLFailed, goexitErrs[siteDeadLetter]
	var err error
	call(siteDeadLetter, &err, func() error {
		cctx := &callCtx{Context: ctx, c: j.c, attempt: j.attempt}
		if j.c.cfg.deadLetter == nil {
			return j.c.logDeadLetter(cctx, j.r, j.err)
		}
		return j.c.cfg.deadLetter(cctx, j.r, j.attempt, j.err)
	})
	if err == nil {
		j.step = stepDone
		j.p.counts.deadLettered.Add(1)
		return
	}
	j.dlErr, j.step = err, stepDLFailed
}

func (j *job) deadLetterFailed(ctx context.Context) {
	j.dlFails++
	j.step = stepDLBackoff
	if ctx.Err() != nil {
		j.step = stepGiveBack
	}
	j.c.log(ctx, slog.LevelError, "seqkafka: dead-letter function failed; will retry",
		append(j.logArgs(), "err", j.dlErr)...)
}

// deadLetterBackoff asks for the wait before the dead-letter function's
// next call: the backoff of attempt attempts + failures so far.
func (j *job) deadLetterBackoff(ctx context.Context) {
	j.askBackoff(ctx, j.c.cfg.attempts+j.dlFails, j.dlErr, stepDLWait)
}

// settle records the record's end in its partition.
func (j *job) settle() {
	done := j.step == stepDone
	p := j.p
	p.mu.Lock()
	p.settle(j.r.Offset, j.sk, done)
	wasBehind := p.win.behind()
	j.c.admitLocked(p) // the place freed goes to the first record waiting
	caughtUp := wasBehind && !p.win.behind()
	resume := p.win.resume()
	p.mu.Unlock()
	j.settled = true
	if resume {
		j.c.syncFetch([]tp{{p.topic, p.part}})
	}
	if caughtUp || resume {
		j.c.wakePoll()
	}
}

func (j *job) logArgs() []any {
	return []any{"topic", j.r.Topic, "partition", j.r.Partition, "offset", j.r.Offset}
}

// callHandler calls the handler for j's attempt, storing its outcome in
// j.err, and counts the call for Stats.
func (c *Consumer) callHandler(ctx context.Context, j *job) {
	start := c.clock()
	if j.attempt == 1 {
		c.queueTime.Observe(start - j.taken)
	}
	j.p.counts.inFlight.Add(1)
	defer func() { // also when the handler calls Goexit
		j.p.counts.inFlight.Add(-1)
		c.handlerTime.Observe(c.clock() - start)
	}()
	call(siteHandler, &j.err, func() error {
		return c.handler(j.callCtx(ctx), j.r)
	})
}

// callCtx returns the ctx of the call of the attempt being made: the first
// attempt's is part of j (most records need no other, and it is never
// changed once set, so a handler that keeps its ctx sees no race); later
// attempts get their own.
func (j *job) callCtx(ctx context.Context) *callCtx {
	if j.attempt == 1 {
		j.first = callCtx{Context: ctx, c: j.c, attempt: 1}
		return &j.first
	}
	return &callCtx{Context: ctx, c: j.c, attempt: j.attempt}
}

// logDeadLetter is the default dead-letter step: log and drop.
func (c *Consumer) logDeadLetter(ctx context.Context, r *kgo.Record, err error) error {
	c.log(ctx, slog.LevelError, "seqkafka: record failed every attempt; dropped",
		"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
	return nil
}

// sleep waits d before a retry, blocking only the record's key: the wait
// runs as a task of the unbounded timers scheduler and is awaited with the
// record's task ctx, so the record's concurrency slot is lent to other keys
// meanwhile (see seqsched.Future.Await). It returns false when ctx ended.
func (c *Consumer) sleep(ctx context.Context, sk sessionKey, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	return c.waitOn(ctx, sk, d, nil)
}

// waitOn waits, on session sk of the timers scheduler, until d passes,
// until ch (when not nil) is closed, or until ctx ends; awaited with ctx,
// a task's ctx, it lends the task's slot. It returns false when ctx ended
// (or the timers scheduler is shut down).
func (c *Consumer) waitOn(ctx context.Context, sk sessionKey, d time.Duration, ch <-chan struct{}) bool {
	f, err := c.timers.Go(ctx, sk, func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	})
	if err != nil {
		return false
	}
	_, err = f.Await(ctx)
	return err == nil && ctx.Err() == nil
}
