package seqotel_test

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqotel/internal/promtest"
)

// The README's table of instruments is what the SDK reports and what
// OpenTelemetry's Prometheus exporter makes of it: the names package seqprom
// uses, with its types and labels (and a WithAttributes attribute as one
// more label).
func TestPrometheusExporterGivesTheNamesTheREADMESays(t *testing.T) {
	st := seqsched.Stats{Sessions: 1}
	m, err := seqotel.New(statsFunc(func() seqsched.Stats { return st }),
		seqotel.WithAttributes(attribute.String("scheduler", "chat")))
	if err != nil {
		t.Fatal(err)
	}
	promtest.Check(t, promtest.Table(t, "README.md"), m, seqotel.ScopeName, "scheduler")
}
