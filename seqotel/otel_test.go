package seqotel_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqotel"
)

var quiet = seqsched.WithLogger(slog.New(slog.DiscardHandler))

func newScheduler(t *testing.T, opts ...seqsched.Option) *seqsched.Scheduler[string] {
	t.Helper()
	s, err := seqsched.New[string](append([]seqsched.Option{quiet}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

// newReader wires s's Metrics to a manual reader as a program wires them
// to a periodic one: the Producer on the reader, the instruments on a
// Meter of the reader's provider.
func newReader(t *testing.T, s seqotel.StatsReader, opts ...seqotel.Option) *sdkmetric.ManualReader {
	t.Helper()
	m, err := seqotel.New(s, opts...)
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(m))
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	reg, err := m.Register(provider.Meter(seqotel.ScopeName))
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Unregister() })
	return reader
}

// collect returns every data point of a collection as "name{k=v,...}":
// sums by value; histograms as _count, _sum and their non-empty buckets
// as _bucket{le} (non-cumulative, as OpenTelemetry counts them).
func collect(t *testing.T, r *sdkmetric.ManualReader) (map[string]float64, error) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	err := r.Collect(context.Background(), &rm)
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, seqotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			key := func(suffix string, set attribute.Set, extra ...string) string {
				var kv []string
				for _, a := range set.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.Emit())
				}
				return m.Name + suffix + "{" + strings.Join(append(kv, extra...), ",") + "}"
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key("", p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				require.Equal(t, "s", m.Unit, m.Name)
				require.Equal(t, metricdata.CumulativeTemporality, d.Temporality)
				for _, p := range d.DataPoints {
					out[key("_count", p.Attributes)] = float64(p.Count)
					out[key("_sum", p.Attributes)] = p.Sum
					require.Len(t, p.BucketCounts, len(p.Bounds)+1)
					for i, n := range p.BucketCounts {
						if n == 0 {
							continue
						}
						le := "+Inf"
						if i < len(p.Bounds) {
							le = strconv.FormatFloat(p.Bounds[i], 'g', -1, 64)
						}
						out[key("_bucket", p.Attributes, "le="+le)] = float64(n)
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out, err
}

func sleep(d time.Duration, err error) func(context.Context) error {
	return func(context.Context) error {
		time.Sleep(d)
		return err
	}
}

// The known workload of prom's test, in a synctest bubble: exact counts
// and every duration in the bucket its bound says.
func TestCollectionAfterAKnownWorkloadIsExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, seqsched.WithWaitHistogram(), seqsched.WithRunHistogram(),
			seqsched.WithSlowTask(2*time.Second))
		r := newReader(t, s, seqotel.WithAttributes(attribute.String("scheduler", "x")))
		ctx := context.Background()
		var fs []*seqsched.Future[struct{}]
		goes := func(ctx context.Context, key string, fn func(context.Context) error, opts ...seqsched.TaskOption) {
			f, err := s.Go(ctx, key, fn, opts...)
			require.NoError(t, err)
			fs = append(fs, f)
		}
		goes(ctx, "a", sleep(time.Second, nil))                       // wait 0, run 1 s
		goes(ctx, "a", sleep(3*time.Second, errors.New("failed")))    // wait 1 s, run 3 s
		goes(ctx, "a", func(context.Context) error { panic("boom") }) // wait 4 s, run 0
		cctx, cancel := context.WithCancel(ctx)
		goes(cctx, "a", sleep(0, nil)) // skipped
		cancel()
		goes(ctx, "b", sleep(90*time.Second, nil), seqsched.High) // wait 0, run 90 s
		goes(ctx, "b", sleep(0, nil), seqsched.High)              // wait 90 s, run 0
		goes(ctx, "d", sleep(10*time.Second, nil), seqsched.High) // wait 0, run 10 s
		goes(ctx, "d", sleep(0, nil))                             // discarded
		synctest.Wait()
		require.NoError(t, s.Discard(ctx, "d"))
		for _, f := range fs {
			_, _ = f.Await(ctx)
		}
		require.NoError(t, s.Remove(ctx, "a"))
		require.NoError(t, s.Remove(ctx, "b"))
		// e: a Replace-tagged task replaced while e is paused, and its
		// replacement run (wait 0, run 0); f: a HaltOnError task fails and
		// halts f (wait 0, run 0).
		require.NoError(t, s.Pause("e"))
		goes(ctx, "e", sleep(0, nil), seqsched.Replace("r"))
		goes(ctx, "e", sleep(0, nil), seqsched.Replace("r"))
		require.NoError(t, s.Resume("e"))
		goes(ctx, "f", sleep(0, errors.New("failed")), seqsched.HaltOnError)
		for _, f := range fs {
			_, _ = f.Await(ctx)
		}

		got, err := collect(t, r)
		require.NoError(t, err)
		want := map[string]float64{
			"seqsched.sessions{scheduler=x}":               0,
			"seqsched.running{scheduler=x}":                0,
			"seqsched.yields{scheduler=x}":                 0,
			"seqsched.slow_tasks{scheduler=x}":             3,
			"seqsched.paused{scheduler=x}":                 1,
			"seqsched.paced{scheduler=x}":                  0,
			"seqsched.halts{scheduler=x}":                  1,
			"seqsched.queued{priority=high,scheduler=x}":   0,
			"seqsched.queued{priority=normal,scheduler=x}": 0,

			"seqsched.task.wait_count{priority=normal,scheduler=x}":           5,
			"seqsched.task.wait_sum{priority=normal,scheduler=x}":             5,
			"seqsched.task.wait_bucket{priority=normal,scheduler=x,le=1e-06}": 3,
			"seqsched.task.wait_bucket{priority=normal,scheduler=x,le=1}":     1,
			"seqsched.task.wait_bucket{priority=normal,scheduler=x,le=5}":     1,
			"seqsched.task.run_count{priority=normal,scheduler=x}":            5,
			"seqsched.task.run_sum{priority=normal,scheduler=x}":              4,
			"seqsched.task.run_bucket{priority=normal,scheduler=x,le=1e-06}":  3,
			"seqsched.task.run_bucket{priority=normal,scheduler=x,le=1}":      1,
			"seqsched.task.run_bucket{priority=normal,scheduler=x,le=5}":      1,
			"seqsched.task.wait_count{priority=high,scheduler=x}":             3,
			"seqsched.task.wait_sum{priority=high,scheduler=x}":               90,
			"seqsched.task.wait_bucket{priority=high,scheduler=x,le=1e-06}":   2,
			"seqsched.task.wait_bucket{priority=high,scheduler=x,le=+Inf}":    1,
			"seqsched.task.run_count{priority=high,scheduler=x}":              3,
			"seqsched.task.run_sum{priority=high,scheduler=x}":                100,
			"seqsched.task.run_bucket{priority=high,scheduler=x,le=1e-06}":    1,
			"seqsched.task.run_bucket{priority=high,scheduler=x,le=10}":       1,
			"seqsched.task.run_bucket{priority=high,scheduler=x,le=+Inf}":     1,
		}
		for _, p := range []string{"high", "normal"} {
			for _, o := range []string{"succeeded", "failed", "panicked", "skipped", "discarded", "replaced"} {
				want["seqsched.tasks{outcome="+o+",priority="+p+",scheduler=x}"] = 0
			}
		}
		want["seqsched.tasks{outcome=succeeded,priority=high,scheduler=x}"] = 3
		for _, o := range []string{"succeeded", "failed", "panicked", "skipped", "discarded", "replaced"} {
			want["seqsched.tasks{outcome="+o+",priority=normal,scheduler=x}"] = 1
		}
		want["seqsched.tasks{outcome=succeeded,priority=normal,scheduler=x}"] = 2 // a1, e's replacement
		want["seqsched.tasks{outcome=failed,priority=normal,scheduler=x}"] = 2    // a2, f's halting task
		assert.Equal(t, want, got)
	})
}

// The gauges while work waits, and a collection during Shutdown: it
// returns at once and sees the running task.
func TestCollectionDuringShutdownSeesTheRunningTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		r := newReader(t, s)
		gate := make(chan struct{})
		open := sync.OnceFunc(func() { close(gate) })
		t.Cleanup(open)
		var inside map[string]float64
		f, err := s.Go(context.Background(), "k", func(context.Context) error {
			<-gate
			inside, _ = collect(t, r) // a collection from the running task
			return nil
		})
		require.NoError(t, err)
		// The gated task starts when k's goroutine runs it, not when Go
		// returns: until then a High task would go ahead of it.
		synctest.Wait()
		for _, p := range []seqsched.Priority{seqsched.High, seqsched.Normal, seqsched.Normal} {
			_, err := s.Go(context.Background(), "k", sleep(0, nil), p)
			require.NoError(t, err)
		}
		shutdown := make(chan error, 1)
		go func() { shutdown <- s.Shutdown(context.Background()) }()
		synctest.Wait()

		got, err := collect(t, r)
		require.NoError(t, err)
		assert.Equal(t, 1.0, got["seqsched.running{}"])
		assert.Equal(t, 1.0, got["seqsched.sessions{}"])
		assert.Equal(t, 1.0, got["seqsched.queued{priority=high}"])
		assert.Equal(t, 2.0, got["seqsched.queued{priority=normal}"])

		open()
		require.NoError(t, <-shutdown)
		_, err = f.Await(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 1.0, inside["seqsched.running{}"])
		got, err = collect(t, r)
		require.NoError(t, err)
		assert.Equal(t, 0.0, got["seqsched.running{}"])
		assert.Equal(t, 3.0, got["seqsched.tasks{outcome=succeeded,priority=normal}"])
		assert.Equal(t, 1.0, got["seqsched.tasks{outcome=succeeded,priority=high}"])
	})
}

// Collections in a loop during a burst: every task runs, counters only
// grow, and the last collection counts every task.
func TestCollectionsDuringABurstSeeCountersOnlyGrow(t *testing.T) {
	const submitters, perSubmitter = 8, 500
	s := newScheduler(t)
	r := newReader(t, s)
	done := make(chan struct{})
	var seen []float64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			got, err := collect(t, r)
			if !assert.NoError(t, err) {
				return
			}
			seen = append(seen, got["seqsched.tasks{outcome=succeeded,priority=normal}"])
			select {
			case <-done:
				return
			default:
			}
		}
	})
	var burst sync.WaitGroup
	futures := make([][]*seqsched.Future[struct{}], submitters)
	for i := range submitters {
		burst.Go(func() {
			for j := range perSubmitter {
				f, err := s.Go(context.Background(), strconv.Itoa((i*perSubmitter+j)%50), sleep(0, nil))
				if !assert.NoError(t, err) {
					return
				}
				futures[i] = append(futures[i], f)
			}
		})
	}
	burst.Wait()
	for _, fs := range futures {
		for _, f := range fs {
			_, err := f.Await(context.Background())
			require.NoError(t, err)
		}
	}
	close(done)
	wg.Wait()
	require.NotEmpty(t, seen)
	for i := 1; i < len(seen); i++ {
		require.LessOrEqual(t, seen[i-1], seen[i], "collection %d after %d", i, i-1)
	}
	got, err := collect(t, r)
	require.NoError(t, err)
	assert.Equal(t, float64(submitters*perSubmitter), got["seqsched.tasks{outcome=succeeded,priority=normal}"])
}

type statsFunc func() seqsched.Stats

func (f statsFunc) Stats() seqsched.Stats { return f() }

// A Stats that panics or calls runtime.Goexit fails the collection with
// an error saying so; it neither crashes nor hangs it, and the next
// collection calls Stats again.
func TestStatsThatPanicsOrGoexitsFailsTheCollectionOnly(t *testing.T) {
	for _, c := range []struct {
		name string
		fail func()
		want string
	}{
		{"panic", func() { panic("stats broke") }, "seqotel: Stats panicked: stats broke"},
		{"Goexit", runtime.Goexit, "seqotel: Stats called runtime.Goexit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			r := newReader(t, statsFunc(func() seqsched.Stats {
				calls++ // collections here are sequential
				if calls == 1 {
					c.fail()
				}
				return seqsched.Stats{Running: 1}
			}))
			_, err := collect(t, r)
			require.ErrorContains(t, err, c.want)
			got, err := collect(t, r)
			require.NoError(t, err)
			assert.Equal(t, 1.0, got["seqsched.running{}"])
		})
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	_, err := seqotel.New(nil)
	require.ErrorIs(t, err, seqotel.ErrNilStats)
	s := newScheduler(t)
	for _, c := range []struct {
		opts []seqotel.Option
		want string
	}{
		{[]seqotel.Option{seqotel.WithAttributes(attribute.String("priority", "x"))},
			`seqotel: WithAttributes(priority=x): attribute "priority" is one the data points use: invalid option`},
		{[]seqotel.Option{seqotel.WithAttributes(attribute.String("", "x"))}, "must not be empty"},
		{[]seqotel.Option{seqotel.WithAttributes(attribute.String("a", "1")), seqotel.WithAttributes(attribute.Int("a", 2))},
			`WithAttributes(a=2): attribute "a" given twice`},
		{[]seqotel.Option{seqotel.WithAttributes(attribute.Int("partition", 1))},
			`attribute "partition" is one the data points use`},
		{[]seqotel.Option{nil}, "nil: must be an Option"},
	} {
		_, err := seqotel.New(s, c.opts...)
		require.ErrorIs(t, err, seqotel.ErrInvalidOption)
		var oe *seqotel.OptionError
		require.ErrorAs(t, err, &oe)
		assert.Contains(t, err.Error(), c.want)
	}
}

// Attributes is how the broker modules take these Options: WithAttributes's
// attributes, in order, checked as New checks them.
func TestAttributesAreWithAttributesInOrder(t *testing.T) {
	got, err := seqotel.Attributes(seqotel.WithAttributes(attribute.String("b", "1")),
		seqotel.WithAttributes(attribute.Int("a", 2)))
	require.NoError(t, err)
	assert.Equal(t, []attribute.KeyValue{attribute.String("b", "1"), attribute.Int("a", 2)}, got)
	_, err = seqotel.Attributes(seqotel.WithAttributes(attribute.String("topic", "x")))
	require.ErrorIs(t, err, seqotel.ErrInvalidOption)
}
