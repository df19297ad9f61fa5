package seqotel

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqotel/internal/spans"
)

// SpanName is the name of the span [Tracing] makes per task.
const SpanName = "seqsched.task"

// The attributes and the event of a task's span.
const (
	// KeyAttribute is the key's attribute by default: fmt.Sprint(key).
	KeyAttribute = attribute.Key("seqsched.key")
	// WaitAttribute is the task's queue wait in seconds, from Submit (or
	// Go, Post) to the start of its run: what the histogram
	// seqsched.task.wait counts.
	WaitAttribute = attribute.Key("seqsched.task.wait")
	// StartEvent marks the start of the task's run, after its queue wait.
	StartEvent = "seqsched.task.start"
	// AttemptAttribute is, on a broker tracer's span, the handler call's
	// attempt (1 for the first): seqkafka.Attempt, seqjetstream.Attempt.
	AttemptAttribute = attribute.Key("seqsched.attempt")
)

// Tracing makes a span per task of a scheduler, as an interceptor: pass
// its Intercept method to seqsched.WithInterceptor.
//
//	tr, err := seqotel.NewTracing[string]()
//	s, err := seqsched.New[string](seqsched.WithInterceptor(tr.Intercept))
//
// The span, named [SpanName], of kind internal, covers the task's queue
// wait and its run: it starts when the task was queued
// ([seqsched.Enqueued]) and ends when it returns. It carries the key
// ([KeyAttribute], see [WithKeyAttribute]) and the queue wait
// ([WaitAttribute]), and the [StartEvent] event at the run's start. A
// task that fails, panics or calls runtime.Goexit ends its span with
// status Error and the error recorded: fn's, a *seqsched.PanicError with
// the stack, or seqsched.ErrGoexit; the panic and the Goexit go on, and
// the scheduler resolves the task with them as without tracing.
//
// The span is a new root, linked to the submitter's span: the span of the
// ctx given to Submit, Go or Post, if it has one. A link, not a parent,
// because a queued task is a message handed over, not a call: it often
// runs after its submitter's span ended (always, for Post), its queue
// wait is no part of the submitter's work, and one key's line gathers
// tasks from many submitters; OpenTelemetry's messaging conventions link
// a consumer's span to its producer's for the same reasons. The span's ctx
// is what fn receives, so that spans fn starts are its children.
//
// Safe for concurrent use; it keeps nothing per task beyond the span.
type Tracing[K comparable] struct {
	tracer trace.Tracer
	key    func(K) attribute.KeyValue // nil: no key attribute
}

// NewTracing returns the Tracing of a scheduler of key type K. It returns
// an [*OptionError] wrapping [ErrInvalidOption] for each bad option,
// joined.
func NewTracing[K comparable](opts ...TracingOption) (*Tracing[K], error) {
	o, err := newTracingOptions(opts, reflect.TypeFor[K]())
	if err != nil {
		return nil, err
	}
	t := &Tracing[K]{tracer: o.provider.Tracer(ScopeName)}
	switch f := o.key.(type) {
	case func(K) attribute.KeyValue:
		t.key = f
	case nil:
		if !o.noKey {
			t.key = func(key K) attribute.KeyValue { return KeyAttribute.String(fmt.Sprint(key)) }
		}
	}
	return t, nil
}

// Intercept is the interceptor: it runs next, the task, inside the task's
// span (see [Tracing]), and returns next's error unchanged. Called with a
// ctx that is no task's (seqsched.Enqueued is not ok), it starts the span
// now and records no wait.
func (t *Tracing[K]) Intercept(ctx context.Context, key K, next func(context.Context) error) error {
	now := time.Now()
	queued, ok := seqsched.Enqueued(ctx)
	if !ok {
		queued = now
	}
	attrs := make([]attribute.KeyValue, 0, 2)
	if t.key != nil {
		attrs = append(attrs, t.key(key))
	}
	if ok {
		attrs = append(attrs, WaitAttribute.Float64(now.Sub(queued).Seconds()))
	}
	start := []trace.SpanStartOption{
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(queued),
		trace.WithAttributes(attrs...),
	}
	if submitter := trace.SpanContextFromContext(ctx); submitter.IsValid() {
		start = append(start, trace.WithLinks(trace.Link{SpanContext: submitter}))
	}
	ctx, span := t.tracer.Start(ctx, SpanName, start...)
	span.AddEvent(StartEvent, trace.WithTimestamp(now))
	return spans.Run(ctx, span, next)
}
