package seqotel_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqotel"
)

// A span per task: a new root linked to the submitter's span, with the
// key, and the parent of what fn traces.
func ExampleTracing() {
	exp := tracetest.NewInMemoryExporter() // a program exports to its collector
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	shop := tp.Tracer("shop")

	tr, err := seqotel.NewTracing[string](seqotel.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	s, err := seqsched.New[string](seqsched.WithInterceptor(tr.Intercept))
	if err != nil {
		panic(err)
	}
	ctx, checkout := shop.Start(context.Background(), "checkout")
	f, err := s.Go(ctx, "order-42", func(ctx context.Context) error {
		_, charge := shop.Start(ctx, "charge card")
		charge.End()
		return nil
	})
	if err != nil {
		panic(err)
	}
	checkout.End()
	_, _ = f.Await(context.Background())
	_ = s.Shutdown(context.Background())

	byID := map[string]string{}
	for _, sp := range exp.GetSpans() {
		byID[sp.SpanContext.SpanID().String()] = sp.Name
	}
	for _, name := range []string{"checkout", seqotel.SpanName, "charge card"} {
		for _, sp := range exp.GetSpans() {
			if sp.Name != name {
				continue
			}
			fmt.Printf("%s: parent %q", sp.Name, byID[sp.Parent.SpanID().String()])
			for _, l := range sp.Links {
				fmt.Printf(", linked to %q", byID[l.SpanContext.SpanID().String()])
			}
			for _, kv := range sp.Attributes {
				if kv.Key == seqotel.KeyAttribute {
					fmt.Printf(", %s=%s", kv.Key, kv.Value.AsString())
				}
			}
			fmt.Println()
		}
	}
	// Output:
	// checkout: parent ""
	// seqsched.task: parent "", linked to "checkout", seqsched.key=order-42
	// charge card: parent "seqsched.task"
}
