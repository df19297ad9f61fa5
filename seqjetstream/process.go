package seqjetstream

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/internal/logkey"
)

const (
	normal = seqsched.Normal
	high   = seqsched.High

	levelWarn  = slog.LevelWarn
	levelError = slog.LevelError
)

// call runs user code f, the consumer's one containment helper: a panic
// is recovered and returned as a *seqsched.PanicError with the panicking
// goroutine's stack. runtime.Goexit cannot be stopped: the goroutine
// unwinds to its site's take-over (process's resume on a message task,
// fetchLoop's replacement on a fetch goroutine), which counts it as a
// failure of the step that called f. No lock is held when call runs.
func call(f func()) (perr error) {
	defer func() {
		if v := recover(); v != nil {
			perr = &seqsched.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	f()
	return nil
}

// step is where a message's processing stands; see process.
type step uint8

const (
	stepAttempt       step = iota // run the handler
	stepFailed                    // the attempt failed: retry, dead-letter or give back
	stepBackoff                   // ask the backoff function for the wait
	stepBackoffFailed             // it failed: log, then wait DefaultBackoff's
	stepWait                      // wait, then attempt again
	stepDeadLetter                // run the dead-letter function
	stepDeadFailed                // it failed: log, then ask the backoff function
	stepDeadBackoff               // ask the backoff function for the wait
	stepDeadWait                  // wait, then run it again
	stepTerm                      // terminate the message
	stepLogTerm                   // log the termination
	stepAck                       // acknowledge the message
	stepGiveBack                  // give the message back (Nak)
	stepDone
)

// run is a message's task, on its key's session.
func (h *held) run(ctx context.Context) error {
	p := h.p
	p.mu.Lock()
	if h.gone { // dropped with its epoch, or given back by Close
		p.mu.Unlock()
		return nil
	}
	h.started = true
	p.mu.Unlock()
	p.inflight.Add(1)
	p.c.queueTime.Observe(time.Since(h.at))
	h.actx = attemptCtx{ctx, h}
	p.process(&h.actx, h)
	return nil
}

// attemptCtx is a handler's ctx: its task's, with the message for Attempt.
// It lives in the message's held record, which saves an allocation per
// message; every other key goes to the task's ctx.
type attemptCtx struct {
	context.Context
	h *held
}

func (c *attemptCtx) Value(key any) any {
	if key == (attemptKey{}) {
		return c.h
	}
	return c.Context.Value(key)
}

// AfterFunc lets context.WithCancel and friends derive from a handler's ctx
// without a goroutine to watch it, as they can from the task's own.
func (c *attemptCtx) AfterFunc(f func()) func() bool { return context.AfterFunc(c.Context, f) }

// process moves h through its steps until it is resolved. Every step that
// runs user code (the handler, the backoff, dead-letter and log functions)
// first records the step that follows its failure; if that code calls
// runtime.Goexit, the deferred resume goes on from there on the unwinding
// goroutine, so a message is never left unresolved. Nesting is bounded by
// the number of user calls a message can make.
func (p *partition) process(ctx context.Context, h *held) {
	finished := false
	defer func() {
		if !finished {
			p.process(ctx, h)
		}
	}()
	for h.next != stepDone {
		p.step(ctx, h)
	}
	finished = true
	p.inflight.Add(-1)
}

func (p *partition) step(ctx context.Context, h *held) {
	cfg := p.c.cfg
	switch h.next {
	case stepAttempt:
		h.attempt++
		h.attemptNo.Store(int32(h.attempt))
		h.next, h.err = stepFailed, errHandlerGoexit
		start := time.Now()
		var err error
		if perr := call(func() { err = p.c.handler(ctx, h.msg) }); perr != nil {
			err = perr
		}
		p.c.handlerTime.Observe(time.Since(start))
		if err == nil {
			h.next, h.err = stepAck, nil
		} else {
			h.err = err
		}

	case stepFailed:
		switch {
		case ctx.Err() != nil: // the epoch was lost, or Close gave up: nothing to send
			h.next = stepDone
		case p.isClosing():
			h.next = stepGiveBack
		case errors.Is(h.err, ErrTerminal) || h.attempt >= cfg.attempts:
			h.next = stepDeadLetter
		default:
			h.next = stepBackoff
		}

	case stepBackoff:
		p.st.retries.Add(1)
		p.askBackoff(ctx, h, h.attempt, h.err, stepWait)

	case stepBackoffFailed:
		h.next = h.bNext
		p.c.logAt(ctx, levelError, "seqjetstream: backoff function failed; DefaultBackoff used",
			"stream", p.stream, "consumer", p.name, "sequence", h.seq, "err", h.bErr)

	case stepWait:
		h.next = stepAttempt
		if !p.sleep(ctx, h.key, h.delay) {
			h.next = p.interrupted(ctx)
		}

	case stepDeadLetter:
		if cfg.deadLetter == nil {
			h.next = stepTerm
			return
		}
		h.next, h.dlErr = stepDeadFailed, errDeadLetterGoexit
		var err error
		if perr := call(func() { err = cfg.deadLetter(ctx, h.msg, h.attempt, h.err) }); perr != nil {
			err = perr
		}
		if err == nil {
			h.next, h.dlErr, h.dlDone = stepTerm, nil, true
		} else {
			h.dlErr = err
		}

	case stepDeadFailed:
		h.dlFails++
		switch {
		case ctx.Err() != nil:
			h.next = stepDone
		case p.isClosing(): // the next owner tries again, from the first attempt
			h.next = stepGiveBack
		default:
			h.next = stepDeadBackoff
		}
		p.c.logAt(ctx, levelError, "seqjetstream: dead-letter function failed; will retry",
			"stream", p.stream, "consumer", p.name, "sequence", h.seq, "err", h.dlErr)

	case stepDeadBackoff:
		p.askBackoff(ctx, h, cfg.attempts+h.dlFails, h.dlErr, stepDeadWait)

	case stepDeadWait:
		h.next = stepDeadLetter
		if !p.sleep(ctx, h.key, h.delay) {
			h.next = p.interrupted(ctx)
		}

	case stepTerm:
		h.next = stepDone
		if p.resolve(h, replyTerm) {
			h.next = stepLogTerm
		}

	case stepLogTerm:
		h.next = stepDone
		args := []any{"stream", p.stream, "consumer", p.name, "subject", logkey.Cut(h.msg.Subject()),
			"sequence", h.seq, "attempts", h.attempt, "err", h.err}
		if h.dlDone {
			p.c.logAt(ctx, slog.LevelDebug, "seqjetstream: message dead-lettered and terminated", args...)
		} else {
			p.c.logAt(ctx, levelError, "seqjetstream: message terminated", args...)
		}

	case stepAck:
		h.next = stepDone
		p.resolve(h, replyAck)

	case stepGiveBack:
		h.next = stepDone
		p.resolve(h, replyNak)
	}
}

// askBackoff sets h's wait before next from the backoff function, asked
// about attempt and err. A backoff that panics or calls runtime.Goexit is
// logged (stepBackoffFailed) and DefaultBackoff gives the wait.
func (p *partition) askBackoff(ctx context.Context, h *held, attempt int, err error, next step) {
	h.delay = DefaultBackoff(ctx, h.msg, attempt, err)
	h.next, h.bNext, h.bErr = stepBackoffFailed, next, errBackoffGoexit // what a Goexit means
	var d time.Duration
	if perr := call(func() { d = p.c.cfg.backoff(ctx, h.msg, attempt, err) }); perr != nil {
		h.bErr = perr
		return
	}
	h.next, h.delay, h.bErr = next, d, nil
}

// interrupted is the step after a wait cut short: nothing when ctx ended
// (the epoch was lost, or Close gave up), else (Close began) give back.
func (p *partition) interrupted(ctx context.Context) step {
	if ctx.Err() != nil {
		return stepDone
	}
	return stepGiveBack
}

func (p *partition) isClosing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closing
}

// sleep waits d before a retry, blocking only the message's key: the wait
// runs as a task of the unbounded timers scheduler and is awaited with the
// message task's ctx, so its concurrency slot is lent to other keys
// meanwhile (see seqsched.Future.Await). It returns false when the wait
// was cut short: ctx ended, or Close began.
func (p *partition) sleep(ctx context.Context, key sessionKey, d time.Duration) bool {
	closing := p.c.closingCh
	if d <= 0 {
		select {
		case <-closing:
			return false
		default:
			return ctx.Err() == nil
		}
	}
	f, err := p.c.timers.Go(ctx, key, func(tctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-tctx.Done():
			return tctx.Err()
		case <-closing:
			return ErrClosed
		}
	})
	if err != nil {
		return false
	}
	_, err = f.Await(ctx)
	return err == nil && ctx.Err() == nil
}

func sortBySeq(hs []*held) { slices.SortFunc(hs, bySeq) }
