// Package spans ends a span around a call of user code, whatever ends the
// call: the one place where seqotel's tracers (the scheduler's, the broker
// consumers') set a span's status.
package spans

import (
	"context"
	"runtime/debug"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
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
