package seqprom_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqprom"
)

var quiet = seqsched.WithLogger(slog.New(slog.DiscardHandler))

func newScheduler(t *testing.T, opts ...seqsched.Option) *seqsched.Scheduler[string] {
	t.Helper()
	s, err := seqsched.New[string](append([]seqsched.Option{quiet}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

func newRegistry(t *testing.T, s seqprom.StatsReader, opts ...seqprom.Option) *prometheus.Registry {
	t.Helper()
	c, err := seqprom.NewCollector(s, opts...)
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	return reg
}

// newGate returns a gate that tasks wait on and the function that opens
// it; the test's cleanup opens it too, before the scheduler's Shutdown,
// so that a failing test ends rather than hangs.
func newGate(t *testing.T) (gate chan struct{}, open func()) {
	gate = make(chan struct{})
	open = sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	return gate, open
}

func sleep(d time.Duration, err error) func(context.Context) error {
	return func(context.Context) error {
		time.Sleep(d)
		return err
	}
}

func await(t *testing.T, f *seqsched.Future[struct{}]) error {
	t.Helper()
	_, err := f.Await(context.Background())
	return err
}

// series is one histogram series as the test reads it: its count, its sum
// in seconds, and its non-empty buckets, non-cumulative, by le.
type series struct {
	Count   uint64
	Sum     float64
	Buckets map[string]uint64
}

// histogram gathers reg and returns the series of name with the given
// priority label.
func histogram(t *testing.T, reg prometheus.Gatherer, name, priority string) series {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "priority") != priority {
				continue
			}
			h := m.GetHistogram()
			s := series{Count: h.GetSampleCount(), Sum: h.GetSampleSum(), Buckets: map[string]uint64{}}
			var below uint64
			for _, b := range h.GetBucket() {
				if n := b.GetCumulativeCount() - below; n > 0 {
					s.Buckets[strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)] = n
				}
				below = b.GetCumulativeCount()
			}
			if n := h.GetSampleCount() - below; n > 0 {
				s.Buckets["+Inf"] = n
			}
			return s
		}
	}
	t.Fatalf("no %s{priority=%q} in the scrape", name, priority)
	return series{}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// A known workload, in a synctest bubble so that every wait and run time
// is exact: each outcome by priority, each duration in the bucket its
// bound says (a bound belongs to its bucket), and 90 s in +Inf.
func TestScrapeCountsAKnownWorkloadExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, seqsched.WithWaitHistogram(), seqsched.WithRunHistogram(),
			seqsched.WithSlowTask(2*time.Second))
		reg := newRegistry(t, s)
		ctx := context.Background()
		high := seqsched.High
		must := func(f *seqsched.Future[struct{}], err error) *seqsched.Future[struct{}] {
			t.Helper()
			require.NoError(t, err)
			return f
		}

		// Session a, Normal: waits 0, 1 s, 4 s; runs 1 s, 3 s, 0.
		a1 := must(s.Go(ctx, "a", sleep(time.Second, nil)))
		a2 := must(s.Go(ctx, "a", sleep(3*time.Second, errors.New("failed"))))
		a3 := must(s.Go(ctx, "a", func(context.Context) error { panic("boom") }))
		cctx, cancel := context.WithCancel(ctx)
		a4 := must(s.Go(cctx, "a", sleep(0, nil)))
		cancel() // a4 is skipped: it never runs
		// Session b, High: waits 0 and 90 s; runs 90 s and 0.
		b1 := must(s.Go(ctx, "b", sleep(90*time.Second, nil), high))
		b2 := must(s.Go(ctx, "b", sleep(0, nil), high))
		// Session d: a High task runs 10 s, and Discard drops the Normal
		// one queued behind it.
		d1 := must(s.Go(ctx, "d", sleep(10*time.Second, nil), high))
		d2 := must(s.Go(ctx, "d", sleep(0, nil)))
		synctest.Wait() // every session has started its first task
		require.NoError(t, s.Discard(ctx, "d"))

		require.NoError(t, await(t, a1))
		require.Error(t, await(t, a2))
		require.ErrorAs(t, await(t, a3), new(*seqsched.PanicError))
		require.ErrorIs(t, await(t, a4), context.Canceled)
		require.NoError(t, await(t, b1))
		require.NoError(t, await(t, b2))
		require.NoError(t, await(t, d1))
		require.ErrorIs(t, await(t, d2), seqsched.ErrDiscarded)
		require.NoError(t, s.Remove(ctx, "a"))
		require.NoError(t, s.Remove(ctx, "b"))
		// Session e: a Replace-tagged task replaced while e is paused, its
		// replacement run. Session f: a HaltOnError task fails and halts f.
		require.NoError(t, s.Pause("e"))
		e1 := must(s.Go(ctx, "e", sleep(0, nil), seqsched.Replace("r")))
		e2 := must(s.Go(ctx, "e", sleep(0, nil), seqsched.Replace("r")))
		require.NoError(t, s.Resume("e"))
		require.ErrorIs(t, await(t, e1), seqsched.ErrReplaced)
		require.NoError(t, await(t, e2))
		require.Error(t, await(t, must(s.Go(ctx, "f", sleep(0, errors.New("failed")), seqsched.HaltOnError))))

		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP seqsched_tasks_total Tasks whose future resolved, by priority and by how they ended.
# TYPE seqsched_tasks_total counter
seqsched_tasks_total{outcome="discarded",priority="high"} 0
seqsched_tasks_total{outcome="discarded",priority="normal"} 1
seqsched_tasks_total{outcome="failed",priority="high"} 0
seqsched_tasks_total{outcome="failed",priority="normal"} 2
seqsched_tasks_total{outcome="panicked",priority="high"} 0
seqsched_tasks_total{outcome="panicked",priority="normal"} 1
seqsched_tasks_total{outcome="replaced",priority="high"} 0
seqsched_tasks_total{outcome="replaced",priority="normal"} 1
seqsched_tasks_total{outcome="skipped",priority="high"} 0
seqsched_tasks_total{outcome="skipped",priority="normal"} 1
seqsched_tasks_total{outcome="succeeded",priority="high"} 3
seqsched_tasks_total{outcome="succeeded",priority="normal"} 2
# HELP seqsched_sessions Sessions with queued or running work.
# TYPE seqsched_sessions gauge
seqsched_sessions 0
# HELP seqsched_running Sessions running a task now.
# TYPE seqsched_running gauge
seqsched_running 0
# HELP seqsched_queued Tasks waiting to start.
# TYPE seqsched_queued gauge
seqsched_queued{priority="high"} 0
seqsched_queued{priority="normal"} 0
# HELP seqsched_yields_total Times a session gave up its turn to another.
# TYPE seqsched_yields_total counter
seqsched_yields_total 0
# HELP seqsched_slow_tasks_total Tasks that ran longer than seqsched.WithSlowTask's limit.
# TYPE seqsched_slow_tasks_total counter
seqsched_slow_tasks_total 3
# HELP seqsched_paused Sessions paused (Pause, or a halt) with no task running.
# TYPE seqsched_paused gauge
seqsched_paused 1
# HELP seqsched_paced Sessions waiting for a token of their seqsched.WithRate bucket.
# TYPE seqsched_paced gauge
seqsched_paced 0
# HELP seqsched_halts_total Times a failed seqsched.HaltOnError task halted its session.
# TYPE seqsched_halts_total counter
seqsched_halts_total 1
`), "seqsched_tasks_total", "seqsched_sessions", "seqsched_running", "seqsched_queued",
			"seqsched_yields_total", "seqsched_slow_tasks_total", "seqsched_paused", "seqsched_paced", "seqsched_halts_total"))

		for _, c := range []struct {
			name, priority string
			want           series
		}{
			{"seqsched_task_wait_seconds", "normal", series{5, 5, map[string]uint64{"1e-06": 3, "1": 1, "5": 1}}},
			{"seqsched_task_run_seconds", "normal", series{5, 4, map[string]uint64{"1e-06": 3, "1": 1, "5": 1}}},
			{"seqsched_task_wait_seconds", "high", series{3, 90, map[string]uint64{"1e-06": 2, "+Inf": 1}}},
			{"seqsched_task_run_seconds", "high", series{3, 100, map[string]uint64{"1e-06": 1, "10": 1, "+Inf": 1}}},
		} {
			got := histogram(t, reg, c.name, c.priority)
			assert.Equal(t, c.want, got, "%s{priority=%q}", c.name, c.priority)
		}
	})
}

// The exposition of one histogram in full: every bound of
// seqsched.HistogramBounds as an le, cumulative counts, the sum in seconds.
func TestHistogramExpositionHasEveryBoundInSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, seqsched.WithRunHistogram())
		c, err := seqprom.NewCollector(s, seqprom.WithNamespace("app"), seqprom.WithConstLabels(prometheus.Labels{"scheduler": "x"}))
		require.NoError(t, err)
		for _, d := range []time.Duration{1500 * time.Microsecond, 20 * time.Second, 45 * time.Second} {
			f, err := s.Go(context.Background(), "k", sleep(d, nil))
			require.NoError(t, err)
			require.NoError(t, await(t, f))
		}
		want := `# HELP app_seqsched_task_run_seconds Run time of tasks, from fn's start to its return (recorded with seqsched.WithRunHistogram).
# TYPE app_seqsched_task_run_seconds histogram
` + cumulative("app_seqsched_task_run_seconds", `priority="high",scheduler="x"`, nil, 0) +
			cumulative("app_seqsched_task_run_seconds", `priority="normal",scheduler="x"`,
				map[string]uint64{"0.002": 1, "20": 1, "60": 1}, 65.0015)
		require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "app_seqsched_task_run_seconds"))
	})
}

// cumulative writes a histogram series in the text format, from its
// non-cumulative buckets by le.
func cumulative(name, labels string, buckets map[string]uint64, sum float64) string {
	var b strings.Builder
	var n uint64
	for _, d := range seqsched.HistogramBounds() {
		le := strconv.FormatFloat(d.Seconds(), 'g', -1, 64)
		n += buckets[le]
		b.WriteString(name + "_bucket{" + labels + `,le="` + le + `"} ` + strconv.FormatUint(n, 10) + "\n")
	}
	n += buckets["+Inf"]
	b.WriteString(name + "_bucket{" + labels + `,le="+Inf"} ` + strconv.FormatUint(n, 10) + "\n")
	b.WriteString(name + "_sum{" + labels + "} " + strconv.FormatFloat(sum, 'g', -1, 64) + "\n")
	b.WriteString(name + "_count{" + labels + "} " + strconv.FormatUint(n, 10) + "\n")
	return b.String()
}

// The gauges while work waits: two sessions each run a task held by a
// gate; behind one of them wait two Normal tasks and one High.
func TestGaugesWhileWorkWaits(t *testing.T) {
	s := newScheduler(t)
	reg := newRegistry(t, s)
	ctx := context.Background()
	gate, open := newGate(t)
	started := make(chan struct{}, 2)
	held := func(context.Context) error { started <- struct{}{}; <-gate; return nil }
	var fs []*seqsched.Future[struct{}]
	for _, k := range []string{"x", "y"} {
		f, err := s.Go(ctx, k, held)
		require.NoError(t, err)
		fs = append(fs, f)
	}
	<-started
	<-started
	for _, p := range []seqsched.Priority{seqsched.Normal, seqsched.Normal, seqsched.High} {
		f, err := s.Go(ctx, "x", sleep(0, nil), p)
		require.NoError(t, err)
		fs = append(fs, f)
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP seqsched_sessions Sessions with queued or running work.
# TYPE seqsched_sessions gauge
seqsched_sessions 2
# HELP seqsched_running Sessions running a task now.
# TYPE seqsched_running gauge
seqsched_running 2
# HELP seqsched_queued Tasks waiting to start.
# TYPE seqsched_queued gauge
seqsched_queued{priority="high"} 1
seqsched_queued{priority="normal"} 2
`), "seqsched_sessions", "seqsched_running", "seqsched_queued"))
	open()
	for _, f := range fs {
		require.NoError(t, await(t, f))
	}
}

// Yields: with one slot and turns of 10 tasks, two sessions of 15 tasks
// queued at once hand the slot over twice (a after 10 tasks, then b).
func TestYieldsAreCounted(t *testing.T) {
	s := newScheduler(t, seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(10))
	reg := newRegistry(t, s)
	ctx := context.Background()
	gate, open := newGate(t)
	first, err := s.Go(ctx, "a", func(context.Context) error { <-gate; return nil })
	require.NoError(t, err)
	fs := []*seqsched.Future[struct{}]{first}
	for _, k := range []string{"a", "b"} {
		for range 15 {
			if k == "a" && len(fs) == 15 {
				break
			}
			f, err := s.Go(ctx, k, sleep(0, nil))
			require.NoError(t, err)
			fs = append(fs, f)
		}
	}
	open()
	for _, f := range fs {
		require.NoError(t, await(t, f))
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP seqsched_yields_total Times a session gave up its turn to another.
# TYPE seqsched_yields_total counter
seqsched_yields_total 2
`), "seqsched_yields_total"))
}
