package bench_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
)

// ScalingProcs are the GOMAXPROCS values BenchmarkScaling runs at.
var ScalingProcs = []int{1, 2, 4, 8, 16}

// scalingLoad is one way BenchmarkScaling's producers spread their tasks.
type scalingLoad struct {
	name    string
	keys    int  // task j goes to key j % keys
	handles bool // Session.Post on a handle per key, instead of Post by key
}

// ScalingLoads are BenchmarkScaling's loads. keys stays within the
// scheduler's idle records (4,096 over all shards, at least 16 per shard
// at 16 Ps), so that a key's session is found again, not made again;
// churn has more keys than idle records on purpose, so that every
// activation makes a session and forgets one (a map insert and delete, as
// 10,000 keys did unintentionally before); hot sends every task to one
// key (the producers contend on one shard lock, one worker runs all);
// handles is keys through an open handle per key (Session.Post: no hash,
// no map lookup, never an idle record).
var ScalingLoads = []scalingLoad{
	{name: "keys", keys: 1_024},
	{name: "churn", keys: 100_000},
	{name: "hot", keys: 1},
	{name: "handles", keys: 1_024, handles: true},
}

// producerCount is one producer's count of its tasks that ran, on a cache
// line of its own, and the channel its last task signals on: the
// benchmark's own bookkeeping is spread over the producers instead of
// being one counter (a WaitGroup) that every worker on every core writes.
type producerCount struct {
	ran  atomic.Int64
	want int64
	done chan struct{}
	_    [40]byte
}

// BenchmarkScaling measures how throughput grows with cores: GOMAXPROCS 1,
// 2, 4, 8 and 16, as many producers as Ps, each load of ScalingLoads,
// no-op tasks and 2 µs of CPU work per task, with and without
// WithMaxConcurrency(GOMAXPROCS). An operation is 100,000 tasks (10,000
// under -short); each task counts itself for its producer (see
// producerCount). It reports tasks/s and tasks/s per core. A GOMAXPROCS
// above the machine's CPUs is skipped: it would measure time slicing, not
// cores. bench/scaling.sh runs it and prints the speed-ups and profiles;
// BENCHMARKS.md has the table.
func BenchmarkScaling(b *testing.B) {
	tasks := 100_000
	if testing.Short() {
		tasks = 10_000
	}
	for _, procs := range ScalingProcs {
		for _, load := range ScalingLoads {
			for _, work := range []time.Duration{0, 2 * time.Microsecond} {
				for _, limited := range []bool{false, true} {
					limit := "none"
					if limited {
						limit = fmt.Sprint(procs)
					}
					name := fmt.Sprintf("procs=%d/load=%s/task=%v/limit=%s", procs, load.name, work, limit)
					b.Run(name, func(b *testing.B) {
						if procs > runtime.NumCPU() {
							b.Skipf("not measured: this machine has %d CPUs", runtime.NumCPU())
						}
						defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
						var opts []seqsched.Option
						if limited {
							opts = append(opts, seqsched.WithMaxConcurrency(procs))
						}
						scaling(b, load, procs, tasks, work, opts)
					})
				}
			}
		}
	}
}

// scaling runs BenchmarkScaling's operation in b.Loop on a new scheduler.
func scaling(b *testing.B, load scalingLoad, procs, tasks int, work time.Duration, opts []seqsched.Option) {
	ctx := context.Background()
	s, err := seqsched.New[int](opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := s.Shutdown(ctx); err != nil {
			b.Error(err)
		}
	}()
	var hs []*seqsched.Session[int]
	if load.handles {
		hs = make([]*seqsched.Session[int], load.keys)
		for k := range hs {
			if hs[k], err = s.Open(k); err != nil {
				b.Fatal(err)
			}
		}
		defer func() {
			for _, h := range hs {
				if err := h.Close(ctx); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	counts := make([]producerCount, procs)
	fns := make([]func(context.Context) error, procs)
	for p := range counts {
		c := &counts[p]
		c.want = int64((tasks - p + procs - 1) / procs) // j = p, p+procs, ... < tasks
		c.done = make(chan struct{}, 1)
		fns[p] = func(context.Context) error {
			if work > 0 {
				spin(work)
			}
			if c.ran.Add(1) == c.want {
				c.done <- struct{}{}
			}
			return nil
		}
	}
	for b.Loop() {
		var producers sync.WaitGroup
		for p := range procs {
			counts[p].ran.Store(0)
			fn := fns[p]
			producers.Go(func() {
				for j := p; j < tasks; j += procs {
					var err error
					if hs != nil {
						err = hs[j%load.keys].Post(ctx, fn)
					} else {
						err = s.Post(ctx, j%load.keys, fn)
					}
					if err != nil {
						panic(err)
					}
				}
			})
		}
		producers.Wait()
		for p := range counts {
			<-counts[p].done
		}
	}
	perSec := float64(tasks) * float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(perSec, "tasks/s")
	b.ReportMetric(perSec/float64(procs), "tasks/s/core")
}

// spin burns d of CPU without sleeping.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}
