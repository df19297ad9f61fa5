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

// Exporting the scheduler's figures to a metrics system. Use the modules
// that do it, rather than wiring it by hand:
//
//   - github.com/seqsched/seqsched/seqprom: seqprom.NewCollector(s) is a
//     prometheus.Collector of every figure (seqsched_tasks_total,
//     seqsched_task_wait_seconds, ...), histograms included;
//     seqprom/promjetstream does the same for a seqjetstream Consumer.
//   - github.com/seqsched/seqsched/seqotel: seqotel.New(s) registers them as
//     asynchronous instruments on a metric.Meter, and its histograms as
//     an sdkmetric.Producer.
//
// Both read Stats when scraped, as this example does with a stand-in for
// a metrics library (so that it needs no dependency): one function per
// figure and lane, read at each scrape. Stats takes each shard's lock
// once, which is cheap at scrape intervals, and never waits for a task.
// The wait quantiles (Stats.High.Wait.P99, ...) and the histograms that
// the modules export are there only with WithWaitHistogram (and
// WithRunHistogram for run times).
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
