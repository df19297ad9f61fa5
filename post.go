package seqsched

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
)

// Post queues fn on session key with no future: fire and forget. It keeps
// every other guarantee of [Scheduler.Go] (order, the High lane, fn's ctx,
// fairness, panics recovered, Remove and Shutdown drain it) and returns
// the same errors when the task is not accepted. Its failures (fn's error,
// a [*PanicError], [ErrGoexit], or, for a task that never ran, its submit
// ctx's error or [ErrClosed]) go to [WithErrorHandler], or without one are
// logged at Error through [WithLogger].
func (s *Scheduler[K]) Post(ctx context.Context, key K, fn func(context.Context) error, opts ...TaskOption) error {
	return post(ctx, s, nil, key, fn, opts)
}

// post is Scheduler.Post (h nil) and Session.Post.
func post[K comparable](ctx context.Context, s *Scheduler[K], h *Session[K], key K,
	fn func(context.Context) error, opts []TaskOption) error {
	if fn == nil {
		return ErrNilFunc
	}
	prio, err := s.admissible(ctx, h, key, opts)
	if err != nil {
		return err
	}
	p := &posted[K]{fn: fn, s: s, key: key}
	p.t.parent, p.t.prio, p.t.job = submitCtx(ctx), prio, p
	return s.queue(h, key, &p.t)
}

// posted is a task with no future (Post): its outcome goes to the error
// handler.
type posted[K comparable] struct {
	t    task
	fn   func(context.Context) error
	err  error
	s    *Scheduler[K]
	key  K
	done atomic.Bool
	// reported is set when report has run: a handler that calls Goexit
	// from report is not called again by takeOver. Read and written by
	// the goroutine running the task only.
	reported bool
}

func (p *posted[K]) exec() (perr *PanicError) {
	normal := false
	defer func() {
		p.fn = nil // let go of what fn captured
		if normal {
			return
		}
		if r := recover(); r != nil {
			perr = &PanicError{Value: r, Stack: debug.Stack()}
			p.err = perr
			return
		}
		p.err = ErrGoexit
	}()
	p.err = p.fn(&p.t)
	normal = true
	return nil
}

func (p *posted[K]) fail(err error) {
	p.t.skipped = true
	p.err = err
	p.fn = nil
}

func (p *posted[K]) publish() *waiter { p.done.Store(true); return nil }
func (p *posted[K]) wake(*waiter)     {}
func (p *posted[K]) resolved() bool   { return p.done.Load() }

// report hands a failure to the error handler, or logs it. It runs on a
// worker (after fn, or when the task is skipped) or on Shutdown's caller
// (tasks a forced Shutdown dropped), with no lock held. A panic in the
// handler is logged; a runtime.Goexit is taken over like one in fn.
func (p *posted[K]) report() {
	if p.err == nil || p.reported {
		return
	}
	p.reported = true
	s := p.s
	h := s.errHandler
	if h == nil {
		var perr *PanicError
		if !errors.As(p.err, &perr) { // a panic was logged with its stack already
			s.log(slog.LevelError, "seqsched: posted task failed", p.key, slog.Any("error", p.err))
		}
		return
	}
	defer func() {
		if r := recover(); r != nil {
			s.log(slog.LevelError, "seqsched: WithErrorHandler panicked", p.key, slog.Any("panic", r))
		}
	}()
	h(p.key, p.err)
}

// A Future has no failure to report: its waiters read it.
func (f *Future[T]) report() {}
