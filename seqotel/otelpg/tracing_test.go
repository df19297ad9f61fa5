package otelpg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqotel/otelpg"
	"github.com/seqsched/seqsched/seqpg"
)

// tracing returns a Tracing that exports to an in-memory exporter, and a
// tracer of the same provider for the test's own spans.
func tracing(t *testing.T) (*otelpg.Tracing, *tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)) // no goroutine: ends spans on the caller's
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := otelpg.NewTracing(seqotel.WithTracerProvider(tp))
	require.NoError(t, err)
	return tr, exp, tp.Tracer("test")
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

// A handler call's span: a consumer span named after the job's kind, a
// new root (the ctx's span is not its parent), with the messaging and
// job attributes, the parent of the span the handler starts, and status
// Error with the handler's error.
func TestTracingMakesANewRootSpanWithTheJobsAttributes(t *testing.T) {
	tr, exp, tracer := tracing(t)
	runCtx, running := tracer.Start(context.Background(), "run")
	boom := errors.New("boom")
	job := &seqpg.Job{ID: 42, Key: "account-7", Seq: 3, Kind: "deposit", Attempt: 2}
	err := tr.Intercept(runCtx, job, func(ctx context.Context) error {
		_, inner := tracer.Start(ctx, "inner")
		inner.End()
		return boom
	})
	running.End()
	assert.Same(t, boom, err, "the handler's error passes through unchanged")

	calls := spansNamed(exp, "process deposit")
	require.Len(t, calls, 1, "spans of the call")
	sp := calls[0]
	assert.Equal(t, trace.SpanKindConsumer, sp.SpanKind)
	assert.False(t, sp.Parent.IsValid(), "a new root; parent = %v", sp.Parent)
	assert.Empty(t, sp.Links, "links")
	assert.Equal(t, []attribute.KeyValue{
		attribute.String("messaging.system", "seqpg"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.message.id", "42"),
		attribute.String("seqpg.key", "account-7"),
		attribute.Int64("seqpg.seq", 3),
		attribute.String("seqpg.kind", "deposit"),
		seqotel.AttemptAttribute.Int(2), // no worker's call: no lease in ctx
	}, sp.Attributes)
	assert.Equal(t, sdktrace.Status{Code: codes.Error, Description: "boom"}, sp.Status)
	inner := spansNamed(exp, "inner")
	require.Len(t, inner, 1)
	assert.Equal(t, sp.SpanContext, inner[0].Parent, "the handler's span is the call span's child")
}

// A handler's panic ends the span with status Error, then goes on.
func TestTracingRecordsAPanicAndLetsItGoOn(t *testing.T) {
	tr, exp, _ := tracing(t)
	func() {
		defer func() { assert.Equal(t, "broken", recover()) }()
		_ = tr.Intercept(context.Background(), &seqpg.Job{ID: 1, Key: "k", Attempt: 1},
			func(context.Context) error { panic("broken") })
	}()
	calls := spansNamed(exp, "process")
	require.Len(t, calls, 1, "spans named process (a job without a kind)")
	assert.Equal(t, codes.Error, calls[0].Status.Code)
	assert.Contains(t, calls[0].Status.Description, "broken")
}

func TestNewTracingRefusesTheKeyOptions(t *testing.T) {
	tr, err := otelpg.NewTracing(seqotel.WithoutKeyAttribute())
	assert.Nil(t, tr)
	assert.ErrorIs(t, err, seqotel.ErrInvalidOption)
}
