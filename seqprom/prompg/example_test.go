package prompg_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqsched/seqsched/seqpg"
	"github.com/seqsched/seqsched/seqprom"
	"github.com/seqsched/seqsched/seqprom/prompg"
)

// A collector registered once per worker; here it reads a fixed Stats in
// place of a *seqpg.Worker.
func Example() {
	worker := fixed(seqpg.Stats{Leased: 2, Completed: 40, Retried: 3})
	c, err := prompg.NewCollector(worker, seqprom.WithConstLabels(prometheus.Labels{"app": "billing"}))
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		switch m := mf.GetMetric()[0]; mf.GetName() {
		case "seqsched_pg_completed_total", "seqsched_pg_retried_total":
			fmt.Println(mf.GetName(), m.GetCounter().GetValue())
		case "seqsched_pg_leased":
			fmt.Println(mf.GetName(), m.GetGauge().GetValue())
		}
	}
	// Output:
	// seqsched_pg_completed_total 40
	// seqsched_pg_leased 2
	// seqsched_pg_retried_total 3
}
