package seqsched_test

import (
	"context"
	"fmt"
	"sort"

	"github.com/seqsched/seqsched"
)

// registry stands in for a metrics library here, so that this example needs
// no dependency. It keeps what Prometheus's NewGaugeFunc and NewCounterFunc,
// or an OpenTelemetry observable instrument's callback, keep: a name, labels
// and a function read at each scrape.
type registry map[string]func() float64

func (r registry) register(name, priority string, read func() float64) {
	r[fmt.Sprintf("%s{priority=%q}", name, priority)] = read
}

// scrape reads every registered function, as a scrape or a collection cycle
// does, and prints the figures in a stable order.
func (r registry) scrape() {
	names := make([]string, 0, len(r))
	for name := range r {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Printf("%s %g\n", name, r[name]())
	}
}

// Exporting the scheduler's figures to a metrics system: register one
// function per figure and lane that reads Stats when it is scraped. Stats
// takes each shard's lock once, which is cheap at scrape intervals; the
// library itself depends on no metrics package.
//
// With Prometheus (github.com/prometheus/client_golang), each register call
// below becomes
//
//	prometheus.MustRegister(prometheus.NewGaugeFunc(
//		prometheus.GaugeOpts{Name: "seqsched_queued_tasks", ConstLabels: prometheus.Labels{"priority": "high"}},
//		func() float64 { return float64(s.Stats().High.Queued) }))
//
// (NewCounterFunc for the counters). With OpenTelemetry
// (go.opentelemetry.io/otel/metric), make observable instruments and read
// Stats once per collection in one callback:
//
//	queued, _ := meter.Int64ObservableGauge("seqsched.queued")
//	meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
//		st := s.Stats()
//		o.ObserveInt64(queued, int64(st.High.Queued), metric.WithAttributes(attribute.String("priority", "high")))
//		o.ObserveInt64(queued, int64(st.Normal.Queued), metric.WithAttributes(attribute.String("priority", "normal")))
//		return nil
//	}, queued)
//
// The wait quantiles (Stats.High.Wait.P99, ...) are there only with
// WithWaitHistogram.
func ExampleScheduler_Stats_metrics() {
	s, err := seqsched.New[string](seqsched.WithWaitHistogram())
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	reg := registry{}
	for _, lane := range []struct {
		name string
		get  func(seqsched.Stats) seqsched.PriorityStats
	}{
		{"high", func(st seqsched.Stats) seqsched.PriorityStats { return st.High }},
		{"normal", func(st seqsched.Stats) seqsched.PriorityStats { return st.Normal }},
	} {
		reg.register("seqsched_queued_tasks", lane.name, func() float64 {
			return float64(lane.get(s.Stats()).Queued)
		})
		reg.register("seqsched_completed_tasks_total", lane.name, func() float64 {
			return float64(lane.get(s.Stats()).Completed)
		})
		reg.register("seqsched_started_tasks_total", lane.name, func() float64 {
			return float64(lane.get(s.Stats()).Wait.Count)
		})
	}

	// Some work: three Normal tasks and one High task on one session.
	for i := 0; i < 3; i++ {
		if err := s.Post(context.Background(), "alice", func(context.Context) error { return nil }); err != nil {
			panic(err)
		}
	}
	f, err := s.Go(context.Background(), "alice", func(context.Context) error { return nil }, seqsched.High)
	if err != nil {
		panic(err)
	}
	if err := s.Remove(context.Background(), "alice"); err != nil { // drains the session
		panic(err)
	}
	if _, err := f.Await(context.Background()); err != nil {
		panic(err)
	}

	reg.scrape()
	// Output:
	// seqsched_completed_tasks_total{priority="high"} 1
	// seqsched_completed_tasks_total{priority="normal"} 3
	// seqsched_queued_tasks{priority="high"} 0
	// seqsched_queued_tasks{priority="normal"} 0
	// seqsched_started_tasks_total{priority="high"} 1
	// seqsched_started_tasks_total{priority="normal"} 3
}
