package seqwatermill

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/seqsched/seqsched/internal/intercept"
)

// Interceptor wraps each hand-over of a message to the consumer (the
// Router's handler with its middleware), as seqkafka's and seqjetstream's
// interceptors wrap their handler calls: to trace, log or measure every
// attempt in one place. It is called for each attempt, on the message's
// key, with the copy's ctx (Attempt(ctx) tells the attempt) and the
// subscriber's message, and calls next to hand a copy over and wait for
// the consumer: the ctx it passes to next becomes the copy's ctx, which the
// handler reads with msg.Context(), so a span or a value added there
// reaches it. next returns nil for an Ack and [ErrNacked] for a Nack (or
// the reason the copy was not handed over: the subscription ending).
//
// The attempt's outcome is what the interceptor returns: nil acks, an
// error counts as a Nack (see WithRetries), and a panic or Goexit in it
// fails the message as a backoff's does. It must call next at most once,
// before it returns, on its own goroutine, and runs with no lock held.
type Interceptor func(ctx context.Context, msg *message.Message, next func(context.Context) error) error

// WithInterceptor adds f around each hand-over (see [Interceptor]). Given
// more than once, the first is outermost. f must not be nil.
func WithInterceptor(f Interceptor) Option {
	name := "WithInterceptor(f)"
	if f == nil {
		name = "WithInterceptor(nil)"
	}
	return option{name, func(o *options) {
		if f == nil {
			bad(o, name, "must not be nil")
			return
		}
		o.interceptors = append(o.interceptors, f)
	}}
}

// handOver is a hand-over of msg with the copy's ctx, as the interceptors
// see it.
type handOver func(ctx context.Context, msg *message.Message) error

// chain returns h wrapped in the interceptors.
func (o *options) chain(h handOver) handOver { return intercept.Chain(h, o.interceptors) }

type attemptKey struct{}

// withAttempt returns ctx marked with the attempt number n.
func withAttempt(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, attemptKey{}, n)
}

// Attempt returns the attempt number (1 for the first) of the copy whose
// ctx is ctx (msg.Context() in a handler), or one derived from it: how many
// times the decorator has handed this message over, its redeliveries
// included. It returns 0 for any other ctx.
func Attempt(ctx context.Context) int {
	n, _ := ctx.Value(attemptKey{}).(int)
	return n
}
