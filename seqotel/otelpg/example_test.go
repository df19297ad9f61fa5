package otelpg_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqotel/otelpg"
	"github.com/seqsched/seqsched/seqpg"
)

// Intercept goes to seqpg.WithInterceptor; here it is called as a worker
// would, around one handler call.
func Example() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr, err := otelpg.NewTracing(seqotel.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	_ = seqpg.WithInterceptor(tr.Intercept) // an option of seqpg.NewWorker

	job := &seqpg.Job{ID: 1, Key: "account-42", Seq: 1, Kind: "deposit", Attempt: 1}
	_ = tr.Intercept(context.Background(), job, func(ctx context.Context) error { return nil })
	for _, s := range exp.GetSpans() {
		fmt.Println(s.Name, s.SpanKind)
	}
	// Output:
	// process deposit consumer
}
