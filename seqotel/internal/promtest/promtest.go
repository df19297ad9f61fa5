// Package promtest checks, for the tests of this module and of the broker
// modules, a README's table of instruments against what an exporter
// reports: through an SDK ManualReader (the OpenTelemetry name, kind, unit
// and attributes) and through OpenTelemetry's Prometheus exporter (the
// Prometheus name, type and labels), so that the mapping the table claims
// is checked, not copied by hand. Only test binaries import it.
package promtest

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Exporter is what this module and the broker modules export: asynchronous
// instruments put on a Meter by Register, and the histograms as a Producer.
type Exporter interface {
	sdkmetric.Producer
	Register(metric.Meter) (metric.Registration, error)
}

// Row is one row of a README's table of instruments.
type Row struct {
	Name       string   // the OpenTelemetry name
	Kind       string   // "counter", "updowncounter" or "histogram"
	Unit       string   // UCUM
	Attributes []string // sorted
	Prometheus string   // the name OpenTelemetry's Prometheus exporter gives it
}

// Table returns the rows of the table in the markdown file whose header
// starts with "| OpenTelemetry | kind | unit | attributes | Prometheus |".
// Its cells are backquoted names; kinds are Int64ObservableCounter,
// Int64ObservableUpDownCounter or "histogram (Producer)".
func Table(t testing.TB, file string) []Row {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var rows []Row
	in := false
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "| OpenTelemetry | kind | unit | attributes | Prometheus |"):
			in = true
			continue
		case !in || strings.HasPrefix(line, "| ---"):
			continue
		case !strings.HasPrefix(line, "|"):
			in = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		require.Len(t, cells, 5, "row %q", line)
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		r := Row{Name: unquote(cells[0]), Unit: unquote(cells[2]), Prometheus: unquote(cells[4])}
		switch k := cells[1]; {
		case k == "Int64ObservableCounter":
			r.Kind = "counter"
		case k == "Int64ObservableUpDownCounter":
			r.Kind = "updowncounter"
		case strings.HasPrefix(k, "histogram"):
			r.Kind = "histogram"
		default:
			t.Fatalf("%s: row %q: unknown kind %q", file, line, k)
		}
		for a := range strings.SplitSeq(cells[3], ",") {
			if a = unquote(strings.TrimSpace(a)); a != "" {
				r.Attributes = append(r.Attributes, a)
			}
		}
		slices.Sort(r.Attributes)
		rows = append(rows, r)
	}
	require.NotEmpty(t, rows, "%s: no table of instruments", file)
	return rows
}

func unquote(s string) string { return strings.Trim(s, "`") }

// Check registers e on a Meter of scope, reads it once through a
// ManualReader and once through OpenTelemetry's Prometheus exporter (with
// its default options), and checks that they report exactly the
// instruments of rows, with their names, kinds, units and attributes, and
// the Prometheus names, types and labels. extra are the attributes every
// data point carries besides a row's (WithAttributes's). Each of e's
// instruments must have a data point: give e a StatsReader whose figures
// make one.
func Check(t *testing.T, rows []Row, e Exporter, scope string, extra ...string) {
	t.Helper()
	ctx := context.Background()
	want := map[string]Row{}
	for _, r := range rows {
		r.Attributes = slices.Sorted(slices.Values(append(slices.Clone(r.Attributes), extra...)))
		want[r.Name] = r
	}

	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(e))
	register(t, e, scope, reader)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]Row{}
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, scope, sm.Scope.Name)
		for _, m := range sm.Metrics {
			r := Row{Name: m.Name, Unit: m.Unit, Prometheus: want[m.Name].Prometheus}
			keys := map[string]bool{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				r.Kind = "updowncounter"
				if d.IsMonotonic {
					r.Kind = "counter"
				}
				for _, p := range d.DataPoints {
					for _, kv := range p.Attributes.ToSlice() {
						keys[string(kv.Key)] = true
					}
				}
			case metricdata.Histogram[float64]:
				r.Kind = "histogram"
				for _, p := range d.DataPoints {
					for _, kv := range p.Attributes.ToSlice() {
						keys[string(kv.Key)] = true
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
			r.Attributes = slices.Sorted(maps.Keys(keys))
			got[m.Name] = r
		}
	}
	assert.Equal(t, want, got, "the instruments, as the OpenTelemetry SDK reports them")

	reg := prometheus.NewPedanticRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithProducer(e))
	require.NoError(t, err)
	register(t, e, scope, exporter)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	type family struct {
		Type   dto.MetricType
		Labels []string
	}
	types := map[string]dto.MetricType{
		"counter": dto.MetricType_COUNTER, "updowncounter": dto.MetricType_GAUGE, "histogram": dto.MetricType_HISTOGRAM,
	}
	wantFamilies := map[string]family{"target_info": {dto.MetricType_GAUGE, nil}}
	for _, r := range want {
		wantFamilies[r.Prometheus] = family{types[r.Kind], r.Attributes}
	}
	gotFamilies := map[string]family{}
	for _, mf := range mfs {
		labels := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !strings.HasPrefix(l.GetName(), "otel_scope_") && mf.GetName() != "target_info" {
					labels[l.GetName()] = true
				}
			}
		}
		gotFamilies[mf.GetName()] = family{mf.GetType(), slices.Sorted(maps.Keys(labels))}
	}
	assert.Equal(t, wantFamilies, gotFamilies,
		"the metric families, as OpenTelemetry's Prometheus exporter names them (otel_scope_* labels left out)")
}

// register makes a provider with reader, registers e's instruments on its
// Meter of scope, and undoes both at the end of the test.
func register(t *testing.T, e Exporter, scope string, reader sdkmetric.Reader) {
	t.Helper()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	reg, err := e.Register(provider.Meter(scope))
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Unregister() })
}
