// Package spans ends a span around a call of user code, whatever ends the
// call: the one place where seqotel's tracers (the scheduler's, the broker
// consumers') set a span's status; and it starts the broker consumers'
// span of a handler call, linked to the producer's.
package spans

import (
	"context"
	"runtime/debug"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqsched/seqsched"
)

// Run calls next with ctx, which must carry span, and ends span when next
// ends: with status Error and the error recorded (an "exception" event)
// when next returns an error, panics or calls runtime.Goexit; unset
// status otherwise. It returns next's error unchanged. A panic is
// recorded as the *seqsched.PanicError the scheduler makes of it, with
// the stack as exception.stacktrace, then goes on with its value after
// the span ended, so that whoever called Run sees it as if Run were not
// there; a Goexit is recorded as seqsched.ErrGoexit and goes on too. It tells the three
// apart as singleflight's doCall does: a normal return sets normal; a
// panic is what recover returns; a Goexit is neither.
func Run(ctx context.Context, span trace.Span, next func(context.Context) error) (err error) {
	normal := false
	defer func() {
		if normal {
			if err != nil {
				fail(span, err)
			}
			span.End()
			return
		}
		if v := recover(); v != nil {
			stack := debug.Stack()
			fail(span, &seqsched.PanicError{Value: v, Stack: stack},
				trace.WithAttributes(attribute.String("exception.stacktrace", string(stack))))
			span.End()
			panic(v)
		}
		fail(span, seqsched.ErrGoexit)
		span.End()
	}()
	err = next(ctx)
	normal = true
	return err
}

func fail(span trace.Span, err error, opts ...trace.EventOption) {
	span.RecordError(err, opts...)
	span.SetStatus(codes.Error, err.Error())
}

// Consume runs next, a broker consumer's handler call, inside a new span
// of kind consumer named name with attrs, and returns next's error
// unchanged (see Run). The span is a new root, linked to the producer's
// span when prop reads one from headers. A span that ctx carries already
// (the consumer's Run ctx may) is neither the parent nor the link: a
// propagator that reads nothing returns ctx as it was. The ctx next
// receives carries the span and whatever else prop read (baggage).
func Consume(ctx context.Context, tracer trace.Tracer, prop propagation.TextMapPropagator, headers propagation.TextMapCarrier,
	name string, attrs []attribute.KeyValue, next func(context.Context) error,
) error {
	start := []trace.SpanStartOption{
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrs...),
	}
	read := prop.Extract(ctx, headers)
	if producer := trace.SpanContextFromContext(read); producer.IsValid() && !producer.Equal(trace.SpanContextFromContext(ctx)) {
		start = append(start, trace.WithLinks(trace.Link{SpanContext: producer}))
	}
	ctx, span := tracer.Start(read, name, start...)
	return Run(ctx, span, next)
}
