package seqjetstream

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// Interceptor wraps each handler call, as gRPC interceptors and net/http
// middleware wrap handlers: to trace, log or measure every message in one
// place (module seqotel/oteljetstream's Tracing makes a span per call).
// It is called for each attempt, on the message's key, with the handler
// call's ctx (Attempt(ctx) tells the attempt) and the message, and calls
// next to run the handler (and the interceptors after it): the ctx it
// passes to next is the one the handler receives, so a span or a value
// added there reaches it. next returns the handler's error; a panic or
// runtime.Goexit in the handler unwinds through the interceptor, as in
// seqsched.WithInterceptor, so that a deferred function there sees it
// (recover and panic again to record a panic).
//
// The attempt's outcome is what the interceptor returns: nil means the
// message is done (acknowledged), and a panic or Goexit in the interceptor
// itself is a failed attempt, as in the handler. It may skip next or call
// it more than once, on its own goroutine, before it returns. It is not
// called around the backoff or the dead-letter function, and must not
// acknowledge the message; Stats' HandlerTime counts the call with its
// interceptors. It runs with no lock held and may call back
// into the consumer with its ctx, as the handler may.
type Interceptor func(ctx context.Context, msg jetstream.Msg, next func(context.Context) error) error
