package bench_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
)

// ScalingProcs are the GOMAXPROCS values BenchmarkScaling runs at.
var ScalingProcs = []int{1, 2, 4, 8, 16}

// BenchmarkScaling measures how throughput grows with cores: GOMAXPROCS 1,
// 2, 4, 8 and 16, as many producers as Ps, 10,000 sessions, no-op tasks
// and 2 µs of CPU work per task, with and without
// WithMaxConcurrency(GOMAXPROCS), through Post by key. It reports tasks/s
// and tasks/s per core. A GOMAXPROCS above the machine's CPUs is skipped:
// it would measure time slicing, not cores. bench/scaling.sh runs it and
// prints the speed-ups; BENCHMARKS.md has the table.
func BenchmarkScaling(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	const sessions = 10_000
	const tasks = 100_000
	for _, procs := range ScalingProcs {
		for _, work := range []time.Duration{0, 2 * time.Microsecond} {
			for _, limited := range []bool{false, true} {
				limit := "none"
				if limited {
					limit = fmt.Sprint(procs)
				}
				name := fmt.Sprintf("procs=%d/task=%v/limit=%s", procs, work, limit)
				b.Run(name, func(b *testing.B) {
					if procs > runtime.NumCPU() {
						b.Skipf("not measured: this machine has %d CPUs", runtime.NumCPU())
					}
					runtime.GOMAXPROCS(procs)
					var opts []seqsched.Option
					if limited {
						opts = append(opts, seqsched.WithMaxConcurrency(procs))
					}
					s, err := seqsched.New[int](opts...)
					if err != nil {
						b.Fatal(err)
					}
					defer s.Shutdown(context.Background())
					var done sync.WaitGroup
					task := func(context.Context) error {
						if work > 0 {
							spin(work)
						}
						done.Done()
						return nil
					}
					for b.Loop() {
						done.Add(tasks)
						var producers sync.WaitGroup
						for p := range procs {
							producers.Go(func() {
								for j := p; j < tasks; j += procs {
									if err := s.Post(context.Background(), j%sessions, task); err != nil {
										panic(err)
									}
								}
							})
						}
						producers.Wait()
						done.Wait()
					}
					perSec := float64(tasks) * float64(b.N) / b.Elapsed().Seconds()
					b.ReportMetric(perSec, "tasks/s")
					b.ReportMetric(perSec/float64(procs), "tasks/s/core")
				})
			}
		}
	}
}

// spin burns d of CPU without sleeping.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}
