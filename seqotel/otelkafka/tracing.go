package otelkafka

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqsched/seqsched/seqkafka"
	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqotel/internal/spans"
)

// Tracing makes a span per handler call of a seqkafka Consumer, as an
// interceptor: pass its Intercept method to seqkafka.WithInterceptor.
//
//	tr, err := otelkafka.NewTracing(seqotel.WithPropagator(propagation.TraceContext{}))
//	c, err := seqkafka.NewConsumer(clientOpts, handle, seqkafka.WithInterceptor(tr.Intercept))
//
// Each attempt's handler call gets a span of kind consumer named
// "process <topic>", from the call's start to its end, with the
// attributes of OpenTelemetry's messaging conventions
// (messaging.system "kafka", messaging.operation.type and .name
// "process", messaging.destination.name the topic,
// messaging.destination.partition.id, messaging.kafka.offset) and
// [seqotel.AttemptAttribute]; the record's key is left out, as it may be
// personal data. A call that fails, panics or calls runtime.Goexit ends
// its span with status Error and the error recorded; the panic and the
// Goexit go on, and the consumer counts the attempt failed as without
// tracing.
//
// The span is a new root, linked to the producer's span when the
// record's headers carry its trace context (read with the propagator,
// seqotel.WithPropagator; W3C traceparent with
// propagation.TraceContext{}), as the messaging conventions link a
// consumer's spans to the producer's: a record is handled long after, and
// apart from, the work that produced it. The ctx the handler receives
// carries the span (spans it starts are its children) and whatever else
// the propagator read (baggage).
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
// the call's span (see [Tracing]), and returns next's error unchanged.
func (t *Tracing) Intercept(ctx context.Context, r *kgo.Record, next func(context.Context) error) error {
	return spans.Consume(ctx, t.tracer, t.prop, headers{r}, "process "+r.Topic, []attribute.KeyValue{
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.destination.name", r.Topic),
		attribute.String("messaging.destination.partition.id", strconv.Itoa(int(r.Partition))),
		attribute.Int64("messaging.kafka.offset", r.Offset),
		seqotel.AttemptAttribute.Int(seqkafka.Attempt(ctx)),
	}, next)
}

// headers is a record's headers as the propagator reads them: Get returns
// the first header of the name (Kafka header names are case-sensitive).
type headers struct{ r *kgo.Record }

func (h headers) Get(key string) string {
	for _, hd := range h.r.Headers {
		if hd.Key == key {
			return string(hd.Value)
		}
	}
	return ""
}

// Set adds a header; Extract, the only use here, never calls it.
func (h headers) Set(key, value string) {
	h.r.Headers = append(h.r.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (h headers) Keys() []string {
	keys := make([]string, len(h.r.Headers))
	for i, hd := range h.r.Headers {
		keys[i] = hd.Key
	}
	return keys
}
