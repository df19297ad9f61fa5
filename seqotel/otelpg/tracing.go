// Package otelpg traces the jobs of a seqpg Worker with OpenTelemetry:
// [Tracing], an interceptor for seqpg.WithInterceptor, makes a span per
// handler call, as package oteljetstream does for a JetStream consumer.
//
//	tr, err := otelpg.NewTracing(seqotel.WithTracerProvider(tp))
//	w, err := seqpg.NewWorker(pool, handle, seqpg.WithInterceptor(tr.Intercept))
//
// It is a module of its own, so that seqpg pulls no OpenTelemetry
// dependency, and a program that traces only the scheduler (package
// seqotel) does not have pgx in its module graph.
package otelpg

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqotel/internal/spans"
	"github.com/seqsched/seqsched/seqpg"
)

// ScopeName is the instrumentation scope of the tracer NewTracing takes
// from its TracerProvider.
const ScopeName = "github.com/seqsched/seqsched/seqotel/otelpg"

// Tracing makes a span per handler call of a seqpg Worker, as an
// interceptor: pass its Intercept method to seqpg.WithInterceptor.
//
// Each attempt's handler call gets a span of kind consumer named
// "process", or "process <kind>" for a job enqueued with seqpg.Kind, from
// the call's start to its end, with the attributes of OpenTelemetry's
// messaging conventions (messaging.system "seqpg",
// messaging.operation.type and .name "process", messaging.message.id the
// job's ID), the job's seqpg.key, seqpg.seq and seqpg.kind (when set),
// seqpg.lease.token (the fencing token of seqpg.LeaseOf), and
// [seqotel.AttemptAttribute]. A call that fails, panics or calls
// runtime.Goexit ends its span with status Error and the error recorded;
// the panic and the Goexit go on, and the worker counts the attempt
// failed as without tracing.
//
// The span is a new root: a seqpg job carries no trace context from the
// transaction that enqueued it, so there is no producer's span to link
// to. The ctx the handler receives carries the span (spans it starts are
// its children).
//
// Safe for concurrent use.
type Tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// NewTracing returns a Tracing. It takes package seqotel's TracingOptions
// (WithTracerProvider; WithPropagator has nothing to read) and returns its
// *OptionError (wrapping seqotel.ErrInvalidOption) for each bad one,
// joined; like the broker tracers it refuses the key options.
func NewTracing(opts ...seqotel.TracingOption) (*Tracing, error) {
	tracer, prop, err := seqotel.BrokerTracer(ScopeName, opts...)
	if err != nil {
		return nil, err
	}
	return &Tracing{tracer: tracer, prop: prop}, nil
}

// Intercept is the interceptor: it runs next, the handler call, inside
// the call's span (see [Tracing]), and returns next's error unchanged.
func (t *Tracing) Intercept(ctx context.Context, job *seqpg.Job, next func(context.Context) error) error {
	name := "process"
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "seqpg"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.message.id", strconv.FormatInt(job.ID, 10)),
		attribute.String("seqpg.key", job.Key),
		attribute.Int64("seqpg.seq", job.Seq),
	}
	if job.Kind != "" {
		name += " " + job.Kind
		attrs = append(attrs, attribute.String("seqpg.kind", job.Kind))
	}
	if f, ok := seqpg.LeaseOf(ctx); ok {
		attrs = append(attrs, attribute.Int64("seqpg.lease.token", f.Token))
	}
	attrs = append(attrs, seqotel.AttemptAttribute.Int(job.Attempt))
	return spans.Consume(ctx, t.tracer, t.prop, propagation.MapCarrier{}, name, attrs, next)
}
