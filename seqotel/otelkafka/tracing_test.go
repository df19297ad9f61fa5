package otelkafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqsched/seqsched/seqkafka"
	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqotel/otelkafka"
)

// tracing returns a Tracing that exports to an in-memory exporter and
// reads W3C traceparent headers, and a tracer of the same provider for
// the test's own spans (a producer's, one the handler starts).
func tracing(t *testing.T) (*otelkafka.Tracing, *tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)) // no goroutine: ends spans on the caller's
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := otelkafka.NewTracing(seqotel.WithTracerProvider(tp), seqotel.WithPropagator(propagation.TraceContext{}))
	require.NoError(t, err)
	return tr, exp, tp.Tracer("test")
}

// produced returns a record of topic orders, partition 2, offset 7, whose
// headers carry the trace context of ctx's span, as a producer that
// injects it writes them.
func produced(ctx context.Context) *kgo.Record {
	r := &kgo.Record{Topic: "orders", Partition: 2, Offset: 7, Key: []byte("alice"),
		Headers: []kgo.RecordHeader{{Key: "seqsched-priority", Value: []byte("high")}}}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	for k, v := range carrier {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return r
}

func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var found []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	return found
}

// sameSpan reports whether a and b name the same span (one may be the
// remote copy a propagator read).
func sameSpan(a, b trace.SpanContext) bool {
	return a.TraceID() == b.TraceID() && a.SpanID() == b.SpanID()
}

// A handler call's span: a consumer span named after the topic, a new
// root linked to the producer's span read from the record's headers,
// with the messaging attributes and the attempt, the parent of the span
// the handler starts, and status Error with the handler's error.
func TestTracingLinksTheProducersSpanFromTheHeaders(t *testing.T) {
	tr, exp, tracer := tracing(t)
	pctx, producer := tracer.Start(context.Background(), "produce")
	r := produced(pctx)
	producer.End()

	runCtx, running := tracer.Start(context.Background(), "run") // the handler's ctx may carry a span: not the link
	boom := errors.New("boom")
	err := tr.Intercept(runCtx, r, func(ctx context.Context) error {
		_, inner := tracer.Start(ctx, "inner")
		inner.End()
		return boom
	})
	running.End()
	assert.Same(t, boom, err, "the handler's error passes through unchanged")

	calls := spansNamed(exp, "process orders")
	require.Len(t, calls, 1, "spans of the call")
	sp := calls[0]
	assert.Equal(t, trace.SpanKindConsumer, sp.SpanKind)
	assert.False(t, sp.Parent.IsValid(), "a new root; parent = %v", sp.Parent)
	require.Len(t, sp.Links, 1, "links")
	assert.True(t, sameSpan(producer.SpanContext(), sp.Links[0].SpanContext), "the link is to the producer's span")
	assert.Equal(t, []attribute.KeyValue{
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.destination.name", "orders"),
		attribute.String("messaging.destination.partition.id", "2"),
		attribute.Int64("messaging.kafka.offset", 7),
		seqotel.AttemptAttribute.Int(0), // no consumer's call: Attempt is 0
	}, sp.Attributes)
	assert.Equal(t, sdktrace.Status{Code: codes.Error, Description: "boom"}, sp.Status)
	inner := spansNamed(exp, "inner")
	require.Len(t, inner, 1)
	assert.Equal(t, sp.SpanContext, inner[0].Parent, "the handler's span is the call span's child")
}

func TestTracingOfAMessageWithoutTraceContextHasNoLink(t *testing.T) {
	tr, exp, tracer := tracing(t)
	ctx, running := tracer.Start(context.Background(), "run")
	defer running.End()
	r := &kgo.Record{Topic: "orders"}
	require.NoError(t, tr.Intercept(ctx, r, func(context.Context) error { return nil }))
	calls := spansNamed(exp, "process orders")
	require.Len(t, calls, 1)
	assert.Empty(t, calls[0].Links, "links")
	assert.False(t, calls[0].Parent.IsValid(), "a new root; parent = %v", calls[0].Parent)
	assert.Equal(t, codes.Unset, calls[0].Status.Code)
}

func TestNewTracingRefusesTheKeyOptions(t *testing.T) {
	tr, err := otelkafka.NewTracing(seqotel.WithoutKeyAttribute())
	assert.Nil(t, tr)
	assert.ErrorIs(t, err, seqotel.ErrInvalidOption)
}

// On a live consumer: a span per attempt, each telling its attempt, each
// linked to the producer's span; the failed one with status Error.
func TestTracingMakesASpanPerHandlerCallOfALiveConsumer(t *testing.T) {
	tr, exp, tracer := tracing(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	pctx, producer := tracer.Start(context.Background(), "produce")
	r := produced(pctx)
	r.Partition, r.Offset = 0, 0
	producer.End()
	require.NoError(t, cl.ProduceSync(context.Background(), r).FirstErr())
	cl.Close()

	done := make(chan struct{})
	var once sync.Once
	cons, err := seqkafka.NewConsumer([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, func(ctx context.Context, r *kgo.Record) error {
		if seqkafka.Attempt(ctx) == 1 {
			return errors.New("once")
		}
		once.Do(func() { close(done) })
		return nil
	}, seqkafka.WithRetries(2, func(context.Context, *kgo.Record, int, error) time.Duration { return 0 }),
		seqkafka.WithInterceptor(tr.Intercept))
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(context.Background()) }()
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, cons.Close(ctx))
	require.NoError(t, <-ran)

	calls := spansNamed(exp, "process orders")
	require.Len(t, calls, 2, "a span per attempt")
	for i, sp := range calls {
		attempt := i + 1
		assert.Contains(t, sp.Attributes, seqotel.AttemptAttribute.Int(attempt), "attempt %d", attempt)
		assert.Contains(t, sp.Attributes, attribute.Int64("messaging.kafka.offset", 0), "attempt %d", attempt)
		require.Len(t, sp.Links, 1, "attempt %d", attempt)
		assert.True(t, sameSpan(producer.SpanContext(), sp.Links[0].SpanContext), "attempt %d: the link is to the producer's span", attempt)
	}
	assert.Equal(t, sdktrace.Status{Code: codes.Error, Description: "once"}, calls[0].Status, "the failed attempt")
	assert.Equal(t, codes.Unset, calls[1].Status.Code, "the attempt that succeeded")
}
