package seqotel_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqotel"
)

// traced returns a scheduler whose tasks are traced into an in-memory
// exporter, and a tracer of the same provider for the test's own spans
// (a submitter's, one that fn starts).
func traced(t *testing.T, opts ...seqotel.TracingOption) (*seqsched.Scheduler[string], *tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)) // no goroutine: ends spans on the caller's
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := seqotel.NewTracing[string](append([]seqotel.TracingOption{seqotel.WithTracerProvider(tp)}, opts...)...)
	require.NoError(t, err)
	return newScheduler(t, seqsched.WithInterceptor(tr.Intercept)), exp, tp.Tracer("test")
}

// span returns the one span named name that exp holds.
func span(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	require.Len(t, found, 1, "spans named %q", name)
	return found[0]
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// A task queued behind another for 3 s: its span starts when it was
// queued, records the 3 s as its wait and at its start event, is a new
// root linked to the submitter's span, carries the key, and is the parent
// of the span fn starts.
func TestTaskSpanCoversQueueWaitAndRunAndLinksTheSubmitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, exp, tracer := traced(t)
		gate := make(chan struct{})
		first, err := s.Go(context.Background(), "alice", func(context.Context) error { <-gate; return nil })
		require.NoError(t, err)

		submitCtx, submitSpan := tracer.Start(context.Background(), "submit")
		queued := time.Now()
		second, err := s.Go(submitCtx, "alice", func(ctx context.Context) error {
			_, inner := tracer.Start(ctx, "inner")
			inner.End()
			return nil
		})
		require.NoError(t, err)
		submitSpan.End()

		time.Sleep(3 * time.Second)
		close(gate)
		_, err = first.Await(context.Background())
		require.NoError(t, err)
		_, err = second.Await(context.Background())
		require.NoError(t, err)
		require.NoError(t, s.Shutdown(context.Background()))

		submitted, inner := span(t, exp, "submit"), span(t, exp, "inner")
		var held, task tracetest.SpanStub // the first task's span, the second's
		for _, sp := range exp.GetSpans() {
			if sp.Name == seqotel.SpanName && sp.Links == nil {
				held = sp
			} else if sp.Name == seqotel.SpanName {
				task = sp
			}
		}
		require.Equal(t, seqotel.SpanName, held.Name, "no span of the first task, submitted without a span")
		require.Equal(t, seqotel.SpanName, task.Name, "no span of the second task, submitted with one")
		assert.Equal(t, attribute.Float64Value(0), attrs(held)[seqotel.WaitAttribute], "the first task's wait")
		assert.Equal(t, queued.Add(3*time.Second), held.EndTime, "end of the first task's span")

		assert.Equal(t, queued, task.StartTime, "start of the task span: when it was queued")
		assert.Equal(t, trace.SpanKindInternal, task.SpanKind)
		assert.False(t, task.Parent.IsValid(), "the task span is a new root; parent = %v", task.Parent)
		assert.NotEqual(t, submitted.SpanContext.TraceID(), task.SpanContext.TraceID(), "trace of the task span")
		require.Len(t, task.Links, 1, "links of the task span")
		assert.Equal(t, submitted.SpanContext, task.Links[0].SpanContext, "the link is to the submitter's span")
		assert.Equal(t, map[attribute.Key]attribute.Value{
			seqotel.KeyAttribute:  attribute.StringValue("alice"),
			seqotel.WaitAttribute: attribute.Float64Value(3),
		}, attrs(task))
		require.Len(t, task.Events, 1, "events of the task span")
		assert.Equal(t, seqotel.StartEvent, task.Events[0].Name)
		assert.Equal(t, queued.Add(3*time.Second), task.Events[0].Time, "start event's time")
		assert.Equal(t, queued.Add(3*time.Second), task.EndTime, "end of the task span")
		assert.Equal(t, codes.Unset, task.Status.Code, "status of a task that succeeded")
		assert.Equal(t, task.SpanContext, inner.Parent, "the span fn starts is the task span's child")
	})
}

// run submits fn on key "k" and returns its error and the one span the
// exporter then holds.
func run(t *testing.T, fn func(context.Context) error, opts ...seqotel.TracingOption) (error, tracetest.SpanStub) {
	t.Helper()
	s, exp, _ := traced(t, opts...)
	f, err := s.Go(context.Background(), "k", fn)
	require.NoError(t, err)
	_, err = f.Await(context.Background())
	return err, span(t, exp, seqotel.SpanName)
}

// exception returns the attributes of the span's one exception event.
func exception(t *testing.T, sp tracetest.SpanStub) map[attribute.Key]attribute.Value {
	t.Helper()
	require.Len(t, sp.Events, 2, "events: the start event and the exception")
	assert.Equal(t, seqotel.StartEvent, sp.Events[0].Name)
	assert.Equal(t, "exception", sp.Events[1].Name)
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range sp.Events[1].Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestFailedTaskSpanHasStatusErrorAndTheError(t *testing.T) {
	boom := errors.New("boom")
	err, sp := run(t, func(context.Context) error { return boom })
	assert.Same(t, boom, err, "the task's error passes through unchanged")
	assert.Equal(t, sdktrace.Status{Code: codes.Error, Description: "boom"}, sp.Status)
	assert.Equal(t, "boom", exception(t, sp)["exception.message"].AsString())
}

func TestPanickingTaskSpanRecordsThePanicAndTheTaskStillPanics(t *testing.T) {
	err, sp := run(t, func(context.Context) error { panic("oops") })
	var pe *seqsched.PanicError
	require.ErrorAs(t, err, &pe, "the task resolves as without tracing")
	assert.Equal(t, "oops", pe.Value)
	assert.Contains(t, string(pe.Stack), "TestPanickingTaskSpanRecordsThePanic", "the task's stack is the panic's")
	assert.Equal(t, sdktrace.Status{Code: codes.Error, Description: "seqsched: task panicked: oops"}, sp.Status)
	ex := exception(t, sp)
	assert.Equal(t, "*seqsched.PanicError", ex["exception.type"].AsString())
	assert.Contains(t, ex["exception.stacktrace"].AsString(), "TestPanickingTaskSpanRecordsThePanic", "the stack recorded")
}

func TestGoexitTaskSpanHasStatusErrorAndTheTaskStillGoexits(t *testing.T) {
	err, sp := run(t, func(context.Context) error { runtime.Goexit(); return nil })
	assert.ErrorIs(t, err, seqsched.ErrGoexit, "the task resolves as without tracing")
	assert.Equal(t, sdktrace.Status{Code: codes.Error, Description: seqsched.ErrGoexit.Error()}, sp.Status)
	assert.Equal(t, seqsched.ErrGoexit.Error(), exception(t, sp)["exception.message"].AsString())
}

func TestKeyAttributeIsTheUsersOrNone(t *testing.T) {
	t.Run("WithKeyAttribute", func(t *testing.T) {
		_, sp := run(t, func(context.Context) error { return nil },
			seqotel.WithKeyAttribute(func(key string) attribute.KeyValue { return attribute.Int("account.len", len(key)) }))
		a := attrs(sp)
		assert.Equal(t, attribute.IntValue(1), a["account.len"])
		assert.NotContains(t, a, seqotel.KeyAttribute)
	})
	t.Run("WithoutKeyAttribute", func(t *testing.T) {
		_, sp := run(t, func(context.Context) error { return nil }, seqotel.WithoutKeyAttribute())
		assert.Equal(t, []attribute.Key{seqotel.WaitAttribute}, keys(sp), "attributes")
	})
}

// WithKeyAttribute's f runs on the task's goroutine before the span
// starts: its panic is the task's, fn does not run, and no span is left
// open or exported.
func TestPanickingKeyAttributeIsTheTasks(t *testing.T) {
	s, exp, _ := traced(t, seqotel.WithKeyAttribute(func(string) attribute.KeyValue { panic("key") }))
	ran := false
	f, err := s.Go(context.Background(), "k", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	_, err = f.Await(context.Background())
	var pe *seqsched.PanicError
	require.ErrorAs(t, err, &pe, "the task's error")
	assert.Equal(t, "key", pe.Value, "the panic value")
	assert.False(t, ran, "fn ran")
	require.NoError(t, s.Shutdown(context.Background()))
	assert.Empty(t, exp.GetSpans(), "spans")
}

func keys(sp tracetest.SpanStub) []attribute.Key {
	var ks []attribute.Key
	for _, kv := range sp.Attributes {
		ks = append(ks, kv.Key)
	}
	return ks
}

func TestNewTracingRefusesBadOptions(t *testing.T) {
	key := func(int) attribute.KeyValue { return attribute.Int("k", 0) }
	for _, tc := range []struct {
		opts []seqotel.TracingOption
		want string
	}{
		{[]seqotel.TracingOption{nil}, "seqotel: nil: must be a TracingOption: invalid option"},
		{[]seqotel.TracingOption{seqotel.WithTracerProvider(nil)}, "seqotel: WithTracerProvider(tp): must not be nil: invalid option"},
		{[]seqotel.TracingOption{seqotel.WithKeyAttribute[string](nil)}, "seqotel: WithKeyAttribute(func(string) attribute.KeyValue): must not be nil: invalid option"},
		{[]seqotel.TracingOption{seqotel.WithKeyAttribute(key)}, "seqotel: WithKeyAttribute(func(int) attribute.KeyValue): the key type must be the Tracing's, string: invalid option"},
		{[]seqotel.TracingOption{seqotel.WithoutKeyAttribute(), seqotel.WithKeyAttribute(key)}, "seqotel: WithKeyAttribute(func(int) attribute.KeyValue): the key's attribute is set twice: give one key option: invalid option"},
		{[]seqotel.TracingOption{seqotel.WithPropagator(propagation.TraceContext{})}, "seqotel: WithPropagator(p): only for the broker tracers: a task's ctx carries its submitter's span: invalid option"},
	} {
		tr, err := seqotel.NewTracing[string](tc.opts...)
		assert.Nil(t, tr)
		assert.ErrorIs(t, err, seqotel.ErrInvalidOption)
		var oe *seqotel.OptionError
		assert.ErrorAs(t, err, &oe)
		assert.EqualError(t, err, tc.want)
	}
}

func TestBrokerTracerRefusesTheKeyOptions(t *testing.T) {
	_, _, err := seqotel.BrokerTracer("scope", seqotel.WithoutKeyAttribute(), seqotel.WithPropagator(nil))
	assert.EqualError(t, err, "seqotel: WithPropagator(p): must not be nil: invalid option\n"+
		"seqotel: WithoutKeyAttribute(): only for seqotel.NewTracing: a broker tracer puts no key on spans: invalid option")
	tracer, prop, err := seqotel.BrokerTracer("scope", seqotel.WithPropagator(propagation.TraceContext{}))
	require.NoError(t, err)
	assert.NotNil(t, tracer)
	assert.Equal(t, propagation.TraceContext{}, prop)
}
