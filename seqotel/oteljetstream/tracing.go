package oteljetstream

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqsched/seqsched/seqjetstream"
	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqotel/internal/spans"
)

// Tracing makes a span per handler call of a seqjetstream Consumer, as an
// interceptor: pass its Intercept method to seqjetstream.WithInterceptor.
//
//	tr, err := oteljetstream.NewTracing(seqotel.WithPropagator(propagation.TraceContext{}))
//	c, err := seqjetstream.NewConsumer(consumers, handle, seqjetstream.WithInterceptor(tr.Intercept))
//
// Each attempt's handler call gets a span of kind consumer named
// "process <stream>", from the call's start to its end, with the
// attributes of OpenTelemetry's messaging conventions (messaging.system
// "nats", messaging.operation.type and .name "process",
// messaging.destination.name the subject), the JetStream message's
// messaging.nats.stream, messaging.nats.consumer and
// messaging.nats.sequence (its stream sequence), and
// [seqotel.AttemptAttribute]. A call that fails, panics or calls
// runtime.Goexit ends its span with status Error and the error recorded;
// the panic and the Goexit go on, and the consumer counts the attempt
// failed as without tracing.
//
// The span is a new root, linked to the publisher's span when the
// message's headers carry its trace context (read with the propagator,
// seqotel.WithPropagator; W3C traceparent with
// propagation.TraceContext{}; header names match exactly, else in any
// case), as the messaging conventions link a consumer's spans to the
// producer's: a message is handled long after, and apart from, the work
// that published it. The ctx the handler receives carries the span
// (spans it starts are its children) and whatever else the propagator
// read (baggage).
//
// Safe for concurrent use.
type Tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// NewTracing returns a Tracing. It takes package seqotel's TracingOptions
// (WithTracerProvider, WithPropagator) and returns its *OptionError
// (wrapping seqotel.ErrInvalidOption) for each bad one, joined.
func NewTracing(opts ...seqotel.TracingOption) (*Tracing, error) {
	tracer, prop, err := seqotel.BrokerTracer(ScopeName, opts...)
	if err != nil {
		return nil, err
	}
	return &Tracing{tracer: tracer, prop: prop}, nil
}

// Intercept is the interceptor: it runs next, the handler call, inside
// the call's span (see [Tracing]), and returns next's error unchanged. A
// message that is not JetStream's (no metadata) gets a span named
// "process" without the messaging.nats attributes.
func (t *Tracing) Intercept(ctx context.Context, msg jetstream.Msg, next func(context.Context) error) error {
	name := "process"
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.destination.name", msg.Subject()),
	}
	if md, err := msg.Metadata(); err == nil {
		name += " " + md.Stream
		attrs = append(attrs,
			attribute.String("messaging.nats.stream", md.Stream),
			attribute.String("messaging.nats.consumer", md.Consumer),
			attribute.Int64("messaging.nats.sequence", int64(md.Sequence.Stream)))
	}
	attrs = append(attrs, seqotel.AttemptAttribute.Int(seqjetstream.Attempt(ctx)))
	return spans.Consume(ctx, t.tracer, t.prop, headers(msg.Headers()), name, attrs, next)
}

// headers is a message's headers as the propagator reads them. NATS
// header names are case-sensitive, but a publisher that injected through
// propagation.HeaderCarrier wrote them canonical ("Traceparent"): Get
// takes the exact name first, then any case.
type headers nats.Header

func (h headers) Get(key string) string {
	if v := nats.Header(h).Get(key); v != "" {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// Set sets a header; Extract, the only use here, never calls it.
func (h headers) Set(key, value string) {
	if h != nil {
		nats.Header(h).Set(key, value)
	}
}

func (h headers) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
