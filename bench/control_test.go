package bench_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/seqsched/seqsched"
)

// BenchmarkControl is the cost of each per-key control feature when it is
// used: a stream of controlN tasks through one handle's Go, each awaited
// at the end, with the feature on, against feature=none side by side in
// one run. Unused, each feature costs the hot path a flag or nil check:
// BENCHMARKS.md compares the stream and round trip before and after them
// (bench/compare.sh).
//
//   - halt: every task with HaltOnError (none fails).
//   - replace: every task with Replace("t"); the producer outruns the
//     worker, so most are replaced before they start.
//   - waitforroom: WithMaxQueue(64) and WaitForRoom: the producer waits
//     for room whenever it is 64 ahead.
//   - interceptor: one WithInterceptor that calls next.
//   - rate: WithRate of 1e9/s, burst 1e6: the bucket is read, never waited
//     on.
//   - pause: the stream is submitted to a paused key, then resumed.
func BenchmarkControl(b *testing.B) {
	noop := func(context.Context) error { return nil }
	cases := []struct {
		name  string
		opts  []seqsched.Option
		topts []seqsched.TaskOption
		pause bool
	}{
		{name: "none"},
		{name: "halt", topts: []seqsched.TaskOption{seqsched.HaltOnError}},
		{name: "replace", topts: []seqsched.TaskOption{seqsched.Replace("t")}},
		{name: "waitforroom", opts: []seqsched.Option{seqsched.WithMaxQueue(64)}, topts: []seqsched.TaskOption{seqsched.WaitForRoom}},
		{name: "interceptor", opts: []seqsched.Option{seqsched.WithInterceptor(func(ctx context.Context, _ int, next func(context.Context) error) error {
			return next(ctx)
		})}},
		{name: "rate", opts: []seqsched.Option{seqsched.WithRate(func(int) (float64, int) { return 1e9, 1e6 })}},
		{name: "pause", pause: true},
	}
	for _, c := range cases {
		b.Run("feature="+c.name, func(b *testing.B) {
			s, err := seqsched.New[int](c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			h, err := s.Open(1)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			fs := make([]*seqsched.Future[struct{}], controlN)
			op := func() {
				if c.pause {
					_ = h.Pause()
				}
				for i := range fs {
					f, err := h.Go(ctx, noop, c.topts...)
					if err != nil {
						b.Fatal(err)
					}
					fs[i] = f
				}
				if c.pause {
					_ = h.Resume()
				}
				for _, f := range fs {
					_, _ = f.Await(ctx)
				}
			}
			op()
			b.ReportAllocs()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			ops := 0
			for b.Loop() {
				op()
				ops++
			}
			runtime.ReadMemStats(&m1)
			tasks := float64(ops * controlN)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/tasks, "ns/task")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/tasks, "allocs/task")
			_ = h.Close(ctx)
			if err := s.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

const controlN = 1000
