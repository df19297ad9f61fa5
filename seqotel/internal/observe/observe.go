// Package observe holds what the Metrics of package seqotel and of its
// broker modules (otelkafka, oteljetstream) share: making their
// asynchronous instruments on one meter and registering the callback that
// observes them, a data point's attributes, and Produce's cumulative
// histograms.
package observe

import (
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Instruments makes asynchronous instruments on one meter, keeping each
// error for Register, and remembers them all for the callback's
// registration.
type Instruments struct {
	meter metric.Meter
	errs  []error
	all   []metric.Observable
}

// On returns the Instruments of meter.
func On(meter metric.Meter) *Instruments { return &Instruments{meter: meter} }

// Counter makes an Int64ObservableCounter.
func (in *Instruments) Counter(name, unit, desc string) metric.Int64ObservableCounter {
	c, err := in.meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.add(c, err)
	return c
}

// Gauge makes an Int64ObservableUpDownCounter: a figure that goes up and
// down (OpenTelemetry's Prometheus exporter calls it a gauge).
func (in *Instruments) Gauge(name, unit, desc string) metric.Int64ObservableUpDownCounter {
	g, err := in.meter.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.add(g, err)
	return g
}

func (in *Instruments) add(o metric.Observable, err error) {
	in.errs = append(in.errs, err)
	in.all = append(in.all, o)
}

// Register registers f as the callback of every instrument made, or
// returns the errors of making them, joined, and registers nothing.
func (in *Instruments) Register(f metric.Callback) (metric.Registration, error) {
	if err := errors.Join(in.errs...); err != nil {
		return nil, err
	}
	return in.meter.RegisterCallback(f, in.all...)
}

// Attributes returns the attributes of a data point: base (the
// WithAttributes option's), then kv.
func Attributes(base []attribute.KeyValue, kv ...attribute.KeyValue) attribute.Set {
	all := make([]attribute.KeyValue, 0, len(base)+len(kv))
	return attribute.NewSet(append(append(all, base...), kv...)...)
}

// Cumulative returns a cumulative histogram of points.
func Cumulative(points ...metricdata.HistogramDataPoint[float64]) metricdata.Histogram[float64] {
	return metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality, DataPoints: points}
}

// One is 1 for true, 0 for false: a flag as a gauge, whose sum over
// consumers or partitions counts them.
func One(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
