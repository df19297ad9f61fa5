package seqsched

import (
	"context"
	"sync/atomic"
	"time"
)

// Submit queues fn as a task on session key and returns its future.
//
// The error is non-nil only when the task was not accepted: [ErrClosed] once
// Shutdown has begun, a [*SessionError] wrapping [ErrSessionClosing] while
// key is being removed or discarded, [ErrQueueFull] past WithMaxQueue, a
// [*KeyError] (wrapping [ErrInvalidKey]) for a key a map cannot hold (a
// NaN, or an interface holding a slice, map or func), [ErrNilFunc],
// [ErrNilContext], or an [*OptionError] for a bad [TaskOption]. Submit never
// blocks, and calls none of ctx's methods.
//
// fn runs on a goroutine of the scheduler with a ctx that carries ctx's
// values and deadline. That ctx is done when ctx is, when Shutdown gives
// up, when [Scheduler.Discard] ends the session (its cause is then
// [ErrDiscarded]), or once the task is over (its future resolved),
// whichever comes first; it keeps the whole context.Context contract at
// every moment, so it may be kept, watched and derived from on any
// goroutine. If ctx is done before the task starts, fn never runs and the
// future resolves with ctx.Err(). A panic in fn is recovered and resolves
// the future with a [*PanicError]; the session goes on.
//
// A task may queue follow-up work with its own ctx: when ctx is a task's
// ctx itself, the new task inherits the ctx that task was submitted with
// (values, deadline, cancellation), not the end of that task. A ctx
// derived from a task's ctx (WithValue, WithTimeout, ...) ends with that
// task, like any child context; pass context.WithoutCancel(ctx) for work
// that must outlive the task whatever ctx it was given.
func Submit[K comparable, T any](ctx context.Context, s *Scheduler[K], key K,
	fn func(context.Context) (T, error), opts ...TaskOption) (*Future[T], error) {
	if fn == nil {
		return nil, ErrNilFunc
	}
	return submit(ctx, s, nil, key, fn, nil, opts)
}

// Go is Submit for a task with no result. It follows Submit's rules.
func (s *Scheduler[K]) Go(ctx context.Context, key K, fn func(context.Context) error,
	opts ...TaskOption) (*Future[struct{}], error) {
	if fn == nil {
		return nil, ErrNilFunc
	}
	return submit[K, struct{}](ctx, s, nil, key, nil, fn, opts)
}

// Post queues fn on session key with no future: fire and forget. It keeps
// every other guarantee of [Scheduler.Go] (order, the High lane, fn's ctx,
// fairness, panics recovered, Remove and Shutdown drain it) and returns
// the same errors when the task is not accepted. Its failures go to
// [WithErrorHandler], or without one to the log (see [WithLogger]): fn's
// error, a [*PanicError], [ErrGoexit], or, for a task that never ran, its
// submit ctx's error, [ErrDiscarded] or [ErrClosed].
//
// The ctx decides how long the task may wait: pass the ctx of what the
// work is for. With a connection's ctx, messages posted to a client are
// dropped unrun once the connection is gone (their failure, the ctx's
// error, is logged at Debug), which is what a server wants on disconnect:
//
//	h.Post(conn.Context(), func(ctx context.Context) error { return conn.Write(ctx, msg) })
//
// With context.Background(), the task runs whatever happens to its
// submitter (until Remove, Discard or Shutdown).
func (s *Scheduler[K]) Post(ctx context.Context, key K, fn func(context.Context) error, opts ...TaskOption) error {
	return post(ctx, s, nil, key, fn, opts)
}

// submit is Submit and Go, by key (h nil) or through a handle: exactly one
// of fn and fn0 is set (Go's fn is kept as it is, so that it needs no
// wrapper closure). It checks what it can before it allocates the task and
// its future.
func submit[K comparable, T any](ctx context.Context, s *Scheduler[K], h *Session[K], key K,
	fn func(context.Context) (T, error), fn0 func(context.Context) error, opts []TaskOption) (*Future[T], error) {
	prio, err := s.admissible(ctx, h, key, opts)
	if err != nil {
		return nil, err
	}
	f := &Future[T]{fn: fn, fn0: fn0}
	f.t.parent, f.t.prio, f.t.job = submitCtx(ctx), prio, f
	f.wg.Add(1)
	if err := s.accept(h, key, &f.t); err != nil {
		return nil, err
	}
	return f, nil
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
	p := &posted[K]{fn: fn, key: key}
	p.t.parent, p.t.prio, p.t.job = submitCtx(ctx), prio, p
	return s.accept(h, key, &p.t)
}

// posted is a task with no future (Post): its failure goes to the error
// handler or the log (worker.reportTask).
type posted[K comparable] struct {
	t    task
	fn   func(context.Context) error
	err  error
	key  K
	done atomic.Bool
}

func (p *posted[K]) exec(t *task) {
	p.err = p.fn(t)
	t.outcome = outcomeSucceeded
	if p.err != nil {
		t.outcome = outcomeFailed
	}
}

func (p *posted[K]) settle(err error, o outcome) { p.err, p.t.outcome = err, o }
func (p *posted[K]) release()                    { p.fn = nil }
func (p *posted[K]) publish() *waiter            { p.done.Store(true); return nil }
func (p *posted[K]) wake(*waiter)                {}
func (p *posted[K]) resolved() bool              { return p.done.Load() }

// admissible checks what Submit, Go and Post can check before they
// allocate: the scheduler, ctx, the options, and a key given by value
// (h == nil; a handle's key was checked at Open).
func (s *Scheduler[K]) admissible(ctx context.Context, h *Session[K], key K, opts []TaskOption) (Priority, error) {
	if h == nil && (s == nil || s.shards == nil) {
		return 0, ErrNotNew
	}
	if ctx == nil {
		return 0, ErrNilContext
	}
	prio, err := taskPriority(opts)
	if err == nil && h == nil {
		err = s.validKey(key)
	}
	return prio, err
}

// submitCtx is the ctx a new task inherits from ctx: a running task's ctx
// stands for the ctx that task was submitted with, so that work a task
// queues with its own ctx is not canceled because that task ended.
func submitCtx(ctx context.Context) context.Context {
	if t, ok := ctx.(*task); ok {
		return t.parent
	}
	return ctx
}

// accept queues t on h's session, or on key's when h is nil: it makes the
// session if key has none, and schedules the session if it has no
// goroutine.
func (s *Scheduler[K]) accept(h *Session[K], key K, t *task) error {
	if s.hist != nil {
		t.at = time.Since(s.epoch).Nanoseconds()
	}
	var sh *shard[K]
	var sess *session[K]
	if h != nil {
		sh = h.sh
		sh.mu.Lock()
		if h.closed || h.sess.gone || h.sess.closing != nil {
			sh.mu.Unlock()
			return &SessionError{Key: key, Err: ErrSessionClosing}
		}
		if s.closed.Load() {
			sh.mu.Unlock()
			return ErrClosed
		}
		sess = h.sess
	} else {
		sh = s.shard(key)
		sh.mu.Lock()
		if s.closed.Load() {
			sh.mu.Unlock()
			return ErrClosed
		}
		if sess = sh.sessions[key]; sess == nil {
			sess = sh.make(s, key)
		} else if sess.closing != nil {
			sh.mu.Unlock()
			return &SessionError{Key: key, Err: ErrSessionClosing}
		}
	}
	return s.admit(sh, sess, t)
}

// admit queues t on sess, activates sess if it has no goroutine (and is
// not held back behind a predecessor), and unlocks sh. Called with sh.mu
// held.
func (s *Scheduler[K]) admit(sh *shard[K], sess *session[K], t *task) error {
	q := &sess.normal
	if t.prio == High {
		q = &sess.high
	}
	if max := s.opts.maxQueue; max > 0 && q.n >= max {
		sh.mu.Unlock()
		return ErrQueueFull
	}
	t.lanes = &sess.lanes
	sh.submitted++
	sh.enqueue(sess, t)
	start, starter := s.wake(sh, sess)
	sh.mu.Unlock()
	switch {
	case start:
		s.startWorker(sess)
	case starter:
		s.startStarter(sh)
	}
	return nil
}
