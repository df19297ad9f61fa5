package seqotel_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqotel"
)

// blockingStats is a StatsReader whose Stats waits for a gate and then
// reads the scheduler's, as a Stats stuck on a lock of its own would; it
// counts its calls.
type blockingStats struct {
	s     *seqsched.Scheduler[string]
	gate  chan struct{}
	calls atomic.Int32
}

func (b *blockingStats) Stats() seqsched.Stats {
	b.calls.Add(1)
	<-b.gate
	return b.s.Stats()
}

// A Stats that does not return holds a collection up only until the
// collection's ctx ends (the PeriodicReader's timeout, 30 s by default),
// holds nothing of the scheduler's meanwhile, and is not called again
// while it is stuck: the next collection waits for the same call. Once it
// returns, collections read Stats afresh.
func TestAStuckStatsHoldsUpACollectionOnlyUntilItsCtxEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, seqsched.WithWaitHistogram())
		b := &blockingStats{s: s, gate: make(chan struct{})}
		open := sync.OnceFunc(func() { close(b.gate) })
		t.Cleanup(open)
		m, err := seqotel.New(b)
		require.NoError(t, err)
		reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(m))
		provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
		reg, err := m.Register(provider.Meter(seqotel.ScopeName))
		require.NoError(t, err)
		t.Cleanup(func() { _ = reg.Unregister() })
		timed := func() context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			t.Cleanup(cancel)
			return ctx
		}

		collected := make(chan error, 1)
		go func() {
			var rm metricdata.ResourceMetrics
			collected <- reader.Collect(timed(), &rm)
		}()
		synctest.Wait() // Stats waits for the gate, the collection for Stats

		for i := range 10 {
			f, err := s.Go(context.Background(), "k", sleep(0, nil), seqsched.Priority(i%2))
			require.NoError(t, err)
			_, err = f.Await(context.Background())
			require.NoError(t, err)
		}
		require.NoError(t, s.Remove(context.Background(), "k"))

		start := time.Now()
		err = <-collected
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "seqotel: Stats has not returned")
		assert.Equal(t, 30*time.Second, time.Since(start), "returned at its deadline")

		_, err = m.Produce(timed())
		require.ErrorIs(t, err, context.DeadlineExceeded, "Produce, on the same stuck call")
		var rm metricdata.ResourceMetrics
		require.ErrorIs(t, reader.Collect(timed(), &rm), context.DeadlineExceeded)
		assert.Equal(t, int32(1), b.calls.Load(), "Stats called once while stuck")

		require.NoError(t, s.Shutdown(context.Background()))
		open()
		synctest.Wait() // the stuck call returns, its result unread
		got, err := collect(t, reader)
		require.NoError(t, err)
		assert.Equal(t, int32(3), b.calls.Load(), "once more for the callback, once for Produce")
		assert.Equal(t, 5.0, got["seqsched.tasks{outcome=succeeded,priority=high}"])
		assert.Equal(t, 5.0, got["seqsched.tasks{outcome=succeeded,priority=normal}"])
		assert.Equal(t, 5.0, got["seqsched.task.wait_count{priority=normal}"])
	})
}
