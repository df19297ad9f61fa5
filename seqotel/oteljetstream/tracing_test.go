package oteljetstream_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqsched/seqsched/seqjetstream"
	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqotel/oteljetstream"
)

// The tracing tests otelkafka's tracing_test.go has under the same names,
// for the same behaviour (docs/brokers.md).

// tracing returns a Tracing that exports to an in-memory exporter and
// reads W3C traceparent headers, and a tracer of the same provider for
// the test's own spans (a publisher's, one the handler starts).
func tracing(t *testing.T) (*oteljetstream.Tracing, *tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)) // no goroutine: ends spans on the caller's
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := oteljetstream.NewTracing(seqotel.WithTracerProvider(tp), seqotel.WithPropagator(propagation.TraceContext{}))
	require.NoError(t, err)
	return tr, exp, tp.Tracer("test")
}

// published returns a message on subject orders.alice whose headers carry
// the trace context of ctx's span, as a publisher that injects it through
// propagation.HeaderCarrier writes them (canonical names: "Traceparent").
func published(ctx context.Context) *nats.Msg {
	m := nats.NewMsg("orders.alice")
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(http.Header(m.Header)))
	return m
}

// fakeMsg is a JetStream message of stream ORDERS, consumer billing,
// stream sequence 7, for calling Intercept without a server; the methods
// Intercept does not call are left nil.
type fakeMsg struct {
	jetstream.Msg
	m *nats.Msg
}

func (f fakeMsg) Subject() string      { return f.m.Subject }
func (f fakeMsg) Headers() nats.Header { return f.m.Header }
func (f fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Stream: "ORDERS", Consumer: "billing", Sequence: jetstream.SequencePair{Stream: 7, Consumer: 3}}, nil
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

// A handler call's span: a consumer span named after the stream, a new
// root linked to the publisher's span read from the message's headers,
// with the messaging attributes and the attempt, the parent of the span
// the handler starts, and status Error with the handler's error.
func TestTracingLinksTheProducersSpanFromTheHeaders(t *testing.T) {
	tr, exp, tracer := tracing(t)
	pctx, publisher := tracer.Start(context.Background(), "publish")
	msg := fakeMsg{m: published(pctx)}
	publisher.End()
	require.Empty(t, msg.m.Header.Get("traceparent"), "the header's name is canonical, not the propagator's")

	runCtx, running := tracer.Start(context.Background(), "run") // the handler's ctx may carry a span: not the link
	boom := errors.New("boom")
	err := tr.Intercept(runCtx, msg, func(ctx context.Context) error {
		_, inner := tracer.Start(ctx, "inner")
		inner.End()
		return boom
	})
	running.End()
	assert.Same(t, boom, err, "the handler's error passes through unchanged")

	calls := spansNamed(exp, "process ORDERS")
	require.Len(t, calls, 1, "spans of the call")
	sp := calls[0]
	assert.Equal(t, trace.SpanKindConsumer, sp.SpanKind)
	assert.False(t, sp.Parent.IsValid(), "a new root; parent = %v", sp.Parent)
	require.Len(t, sp.Links, 1, "links")
	assert.True(t, sameSpan(publisher.SpanContext(), sp.Links[0].SpanContext), "the link is to the publisher's span")
	assert.Equal(t, []attribute.KeyValue{
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.destination.name", "orders.alice"),
		attribute.String("messaging.nats.stream", "ORDERS"),
		attribute.String("messaging.nats.consumer", "billing"),
		attribute.Int64("messaging.nats.sequence", 7),
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
	require.NoError(t, tr.Intercept(ctx, fakeMsg{m: nats.NewMsg("orders.bob")}, func(context.Context) error { return nil }))
	calls := spansNamed(exp, "process ORDERS")
	require.Len(t, calls, 1)
	assert.Empty(t, calls[0].Links, "links")
	assert.False(t, calls[0].Parent.IsValid(), "a new root; parent = %v", calls[0].Parent)
	assert.Equal(t, codes.Unset, calls[0].Status.Code)
}

// coreMsg is a message that is not JetStream's: it has no metadata.
type coreMsg struct{ fakeMsg }

func (coreMsg) Metadata() (*jetstream.MsgMetadata, error) { return nil, jetstream.ErrNotJSMessage }

func TestTracingOfAMessageWithoutMetadataHasNoNatsAttributes(t *testing.T) {
	tr, exp, _ := tracing(t)
	require.NoError(t, tr.Intercept(context.Background(), coreMsg{fakeMsg{m: nats.NewMsg("orders.bob")}},
		func(context.Context) error { return nil }))
	calls := spansNamed(exp, "process")
	require.Len(t, calls, 1, "spans named process")
	assert.Equal(t, []attribute.KeyValue{
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.destination.name", "orders.bob"),
		seqotel.AttemptAttribute.Int(0),
	}, calls[0].Attributes)
}

func TestNewTracingRefusesTheKeyOptions(t *testing.T) {
	tr, err := oteljetstream.NewTracing(seqotel.WithoutKeyAttribute())
	assert.Nil(t, tr)
	assert.ErrorIs(t, err, seqotel.ErrInvalidOption)
}

// On a live consumer: a span per attempt, each telling its attempt, each
// linked to the publisher's span; the failed one with status Error.
func TestTracingMakesASpanPerHandlerCallOfALiveConsumer(t *testing.T) {
	tr, exp, tracer := tracing(t)
	js := startServer(t)
	ctx := context.Background()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "ORDERS", Subjects: []string{"orders.*"}, Storage: jetstream.MemoryStorage,
	})
	require.NoError(t, err)
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	pctx, publisher := tracer.Start(ctx, "publish")
	_, err = js.PublishMsg(ctx, published(pctx))
	require.NoError(t, err)
	publisher.End()

	done := make(chan struct{})
	var once sync.Once
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, func(ctx context.Context, msg jetstream.Msg) error {
		if seqjetstream.Attempt(ctx) == 1 {
			return errors.New("once")
		}
		once.Do(func() { close(done) })
		return nil
	}, seqjetstream.WithRetries(2, func(context.Context, jetstream.Msg, int, error) time.Duration { return 0 }),
		seqjetstream.WithInterceptor(tr.Intercept))
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	<-done
	closeCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, c.Close(closeCtx))
	require.NoError(t, <-ran)

	calls := spansNamed(exp, "process ORDERS")
	require.Len(t, calls, 2, "a span per attempt")
	for i, sp := range calls {
		attempt := i + 1
		assert.Contains(t, sp.Attributes, seqotel.AttemptAttribute.Int(attempt), "attempt %d", attempt)
		assert.Contains(t, sp.Attributes, attribute.Int64("messaging.nats.sequence", 1), "attempt %d", attempt)
		require.Len(t, sp.Links, 1, "attempt %d", attempt)
		assert.True(t, sameSpan(publisher.SpanContext(), sp.Links[0].SpanContext), "attempt %d: the link is to the publisher's span", attempt)
	}
	assert.Equal(t, sdktrace.Status{Code: codes.Error, Description: "once"}, calls[0].Status, "the failed attempt")
	assert.Equal(t, codes.Unset, calls[1].Status.Code, "the attempt that succeeded")
}
