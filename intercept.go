package seqsched

import (
	"context"
	"fmt"
	"time"
)

// WithInterceptor wraps every task's fn in f, as gRPC interceptors and
// net/http middleware wrap handlers: to add tracing, logging, metrics or a
// panic policy in one place. f is called on the task's goroutine with the
// task's ctx and key, and calls next to run the task (and the interceptors
// after it); the ctx it passes to next is the ctx fn receives, so a span or
// a value added there reaches fn. Several WithInterceptor options nest in
// the order given: the first is outermost.
//
// The task's error is what the outermost f returns; a Submit's value is
// what fn returned the last time next ran it (the zero value if it never
// did). f may skip next (the task then succeeds or fails by f's own
// return) or call it more than once (a retry policy), on its own
// goroutine, before it returns. A panic or runtime.Goexit in f is the
// task's, as in fn: the task resolves with a [*PanicError] or [ErrGoexit].
// Tasks that never run (their ctx ended first, Discard dropped them or the
// scheduler gave up, a newer one replaced them) are not intercepted.
//
// A ctx that f derives from the task's ctx (a span's, a value's) ends with
// the task, like any ctx derived from it: work that fn queues with it and
// that must outlive the task needs context.WithoutCancel (see [Submit]).
// Its key type must be the scheduler's: New returns an [*OptionError]
// otherwise. With the option, Submit reads the clock once per task (for
// [Enqueued]); without it a task costs nothing more.
func WithInterceptor[K comparable](f func(ctx context.Context, key K, next func(context.Context) error) error) Option {
	return &interceptorOption{f}
}

type interceptorOption struct{ fn any }

func (o *interceptorOption) apply(opts *options) { opts.interceptors = append(opts.interceptors, o.fn) }
func (o *interceptorOption) String() string      { return fmt.Sprintf("WithInterceptor(%T)", o.fn) }

// Enqueued returns when the task whose ctx is ctx (or derived from it) was
// queued, for an interceptor that reports the queue wait (a span that
// starts when the task was submitted): ok is false for any other ctx, and
// for tasks of a scheduler with neither an interceptor nor
// [WithWaitHistogram], which read no clock at Submit.
func Enqueued(ctx context.Context) (at time.Time, ok bool) {
	t, _ := ctx.Value(runningKey{}).(*task)
	if t == nil || !t.sess.core.stamped {
		return time.Time{}, false
	}
	return t.sess.core.epoch.Add(time.Duration(t.at)), true
}

// interceptor is one WithInterceptor function.
type interceptor[K comparable] func(ctx context.Context, key K, next func(context.Context) error) error

// intercepted runs t, the task in sess's worker's hand, through the
// interceptors, innermost fn, and records the outermost one's error as the
// task's.
func (s *Scheduler[K]) intercepted(sess *session[K], t *task) {
	err := s.through(sess, 0, t)
	t.job.conclude(err)
}

// through runs interceptor i with ctx; its next runs the rest. The nexts
// are made once per session record and find the task in the worker's
// hand, so that a task costs no allocation for them.
func (s *Scheduler[K]) through(sess *session[K], i int, ctx context.Context) error {
	if i == len(s.interceptors) {
		t := sess.w.t
		t.job.exec(t, ctx)
		return t.job.result()
	}
	w := &sess.w
	if w.nexts == nil {
		w.nexts = make([]func(context.Context) error, len(s.interceptors))
		for j := range w.nexts {
			w.nexts[j] = func(ctx context.Context) error { return s.through(sess, j+1, ctx) }
		}
	}
	return s.interceptors[i](ctx, sess.key, w.nexts[i])
}
