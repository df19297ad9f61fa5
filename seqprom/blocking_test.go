package seqprom_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched"
)

// value is the sum of name's samples in a gather of reg, for counters and
// gauges.
func value(t testing.TB, reg prometheus.Gatherer, name string) float64 {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return v
}

// A scrape while Shutdown waits for a running task returns at once, and
// shows the task running; so does a scrape from that task itself.
func TestScrapeDuringShutdownReturnsAndSeesTheRunningTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		reg := newRegistry(t, s)
		gate, open := newGate(t)
		var inside float64
		f, err := s.Go(context.Background(), "k", func(context.Context) error {
			<-gate
			inside = value(t, reg, "seqsched_running") // a scrape from the task
			return nil
		})
		require.NoError(t, err)
		shutdown := make(chan error, 1)
		go func() { shutdown <- s.Shutdown(context.Background()) }()
		synctest.Wait() // Shutdown waits for the task, the task for the gate

		_, err = s.Go(context.Background(), "k", sleep(0, nil))
		require.ErrorIs(t, err, seqsched.ErrClosed, "Shutdown has begun")
		assert.Equal(t, 1.0, value(t, reg, "seqsched_running"))
		assert.Equal(t, 1.0, value(t, reg, "seqsched_sessions"))
		assert.Equal(t, 0.0, value(t, reg, "seqsched_tasks_total"))

		open()
		require.NoError(t, <-shutdown)
		require.NoError(t, await(t, f))
		assert.Equal(t, 1.0, inside, "running, scraped by the running task")
		assert.Equal(t, 0.0, value(t, reg, "seqsched_running"))
		assert.Equal(t, 1.0, value(t, reg, "seqsched_tasks_total"), "after Shutdown")
	})
}

// Scrapes in a loop during a burst from several goroutines: every task
// runs, the counters only grow from one scrape to the next, and the last
// scrape counts every task.
func TestScrapesDuringABurstSeeCountersOnlyGrow(t *testing.T) {
	const submitters, perSubmitter, keys = 8, 500, 50
	s := newScheduler(t)
	reg := newRegistry(t, s)

	done := make(chan struct{})
	var scrapes []float64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			scrapes = append(scrapes, value(t, reg, "seqsched_tasks_total"))
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
				f, err := s.Go(context.Background(), string(rune('a'+(i*perSubmitter+j)%keys)), sleep(0, nil))
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
			require.NoError(t, await(t, f))
		}
	}
	close(done)
	wg.Wait()

	require.NotEmpty(t, scrapes)
	for i := 1; i < len(scrapes); i++ {
		require.LessOrEqual(t, scrapes[i-1], scrapes[i], "scrape %d after %d", i, i-1)
	}
	assert.Equal(t, float64(submitters*perSubmitter), value(t, reg, "seqsched_tasks_total"))
}

// blockingStats is a StatsReader whose Stats reads the scheduler's and then
// waits for a gate, as a scrape stuck in a slow exporter would.
type blockingStats struct {
	s       *seqsched.Scheduler[string]
	entered chan struct{}
	gate    chan struct{}
}

func (b blockingStats) Stats() seqsched.Stats {
	st := b.s.Stats()
	close(b.entered)
	<-b.gate
	return st
}

// A scrape stuck in Stats holds nothing of the scheduler's: tasks run,
// Remove drains and Shutdown completes while it waits.
func TestAStuckScrapeHoldsUpNothing(t *testing.T) {
	s := newScheduler(t)
	gate, open := newGate(t)
	b := blockingStats{s: s, entered: make(chan struct{}), gate: gate}
	reg := newRegistry(t, b)
	scraped := make(chan error, 1)
	go func() {
		_, err := reg.Gather()
		scraped <- err
	}()
	<-b.entered

	for i := range 10 {
		f, err := s.Go(context.Background(), "k", sleep(0, nil), seqsched.Priority(i%2))
		require.NoError(t, err)
		require.NoError(t, await(t, f))
	}
	require.NoError(t, s.Remove(context.Background(), "k"))
	require.NoError(t, s.Shutdown(context.Background()))

	open()
	require.NoError(t, <-scraped)
	assert.Equal(t, 10.0, value(t, newRegistry(t, s), "seqsched_tasks_total"))
}

// statsFunc adapts a function to a StatsReader.
type statsFunc func() seqsched.Stats

func (f statsFunc) Stats() seqsched.Stats { return f() }

// A Stats that panics or calls runtime.Goexit fails the scrape with an
// error saying so (with the panic's stack); it neither crashes nor hangs
// it, and the registry's other metrics are still gathered.
func TestStatsThatPanicsOrGoexitsFailsTheScrapeOnly(t *testing.T) {
	for _, c := range []struct {
		name  string
		stats func() seqsched.Stats
		want  []string
	}{
		{"panic", func() seqsched.Stats { panic("stats broke") },
			[]string{"seqprom: Stats panicked: stats broke", "goroutine "}},
		{"nil panic", func() seqsched.Stats { panic(nil) },
			[]string{"seqprom: Stats panicked: panic called with nil argument"}},
		{"Goexit", func() seqsched.Stats { runtimeGoexit(); return seqsched.Stats{} },
			[]string{"seqprom: Stats called runtime.Goexit"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := newRegistry(t, statsFunc(c.stats))
			other := prometheus.NewCounter(prometheus.CounterOpts{Name: "other_total", Help: "Another metric."})
			other.Inc()
			require.NoError(t, reg.Register(other))
			mfs, err := reg.Gather()
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
			require.Len(t, mfs, 1)
			assert.Equal(t, "other_total", mfs[0].GetName())
			assert.Equal(t, 1.0, testutil.ToFloat64(other))
		})
	}
}
