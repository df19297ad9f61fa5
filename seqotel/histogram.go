package seqotel

import (
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seqsched/seqsched"
)

// bounds are seqsched.HistogramBounds in seconds.
var bounds = func() []float64 {
	b := seqsched.HistogramBounds()
	s := make([]float64, len(b))
	for i, d := range b {
		s[i] = d.Seconds()
	}
	return s
}()

// HistogramDataPoint returns h as a histogram data point in seconds, with
// the given attributes, cumulative from start to now: the bounds of
// [seqsched.HistogramBounds] (1e-06 ... 60), h's bucket counts as they
// are (non-cumulative, as OpenTelemetry counts them, the last one above
// 60 s), the count the sum of the buckets (which Count is, in every
// snapshot) and no min or max. It is what this module's Produce reports
// for every seqsched.Histogram (the scheduler's, and the broker modules'),
// for a Producer of your own. The slices returned are the caller's.
func HistogramDataPoint(h seqsched.Histogram, attrs attribute.Set, start, now time.Time) metricdata.HistogramDataPoint[float64] {
	var n uint64
	for _, c := range h.Buckets {
		n += c
	}
	return metricdata.HistogramDataPoint[float64]{
		Attributes: attrs, StartTime: start, Time: now,
		Count: n, Sum: h.Sum.Seconds(),
		Bounds: slices.Clone(bounds), BucketCounts: slices.Clone(h.Buckets[:]),
	}
}
