package prompg_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/internal/pgtest"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/seqsched/seqsched/seqprom/prompg"
)

// newDB returns a pool on a fresh, migrated database, closed when the test
// ends.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.Shared(t).CreateDB(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, seqpg.Migrate(ctx, pool))
	return pool
}

// A real worker's figures reach the scrape: three jobs completed, one
// attempt failed and retried, the scheduler's tasks counted as the
// worker's own Stats count them.
func TestScrapeOfARealWorker(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	var failed atomic.Bool
	w, err := seqpg.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		if string(job.Payload) == "flaky" && failed.CompareAndSwap(false, true) {
			return errors.New("flaky: first attempt fails")
		}
		return nil
	}, seqpg.WithPollInterval(50*time.Millisecond), seqpg.WithLease(10*time.Second),
		seqpg.WithRetries(3, func(context.Context, *seqpg.Job, int, error) time.Duration { return 0 }))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, w.Close(cctx))
		require.NoError(t, <-done)
	}()
	c, err := prompg.NewCollector(w)
	require.NoError(t, err)

	for _, j := range []struct{ key, payload string }{{"a", "1"}, {"a", "flaky"}, {"b", "2"}} {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := seqpg.Enqueue(ctx, tx, j.key, []byte(j.payload))
			return err
		}))
	}
	// Completions commit after the handler returns; nothing signals them
	// to a test, so wait for the worker's count (not to order events).
	deadline := time.Now().Add(10 * time.Second)
	for w.Stats().Completed < 3 {
		require.False(t, time.Now().After(deadline), "timed out waiting for 3 completions: %+v", w.Stats())
		time.Sleep(10 * time.Millisecond)
	}
	before := w.Stats()
	assert.Equal(t, float64(3), gather(t, c, "seqsched_pg_completed_total"))
	assert.Equal(t, float64(1), gather(t, c, "seqsched_pg_retried_total"))
	assert.Equal(t, float64(0), gather(t, c, "seqsched_pg_dead_lettered_total"))
	assert.Equal(t, float64(0), gather(t, c, "seqsched_pg_halted_total"))
	assert.Equal(t, float64(0), gather(t, c, "seqsched_pg_lease_lost_total"))
	assert.Equal(t, float64(0), gather(t, c, "seqsched_pg_lease_expired_total"))
	assert.Equal(t, float64(0), gather(t, c, "seqsched_pg_lease_expired_running_total"))
	// Claims and the scheduler's tasks go on as the worker looks for work:
	// the scrape sees a value between the Stats read before and after it.
	claimed := gather(t, c, "seqsched_pg_claimed_total")
	tasks := gather(t, c, "seqsched_tasks_total", "priority", "normal", "outcome", "succeeded")
	after := w.Stats()
	assert.GreaterOrEqual(t, before.Claimed, uint64(2), "keys a and b each claimed")
	assert.GreaterOrEqual(t, before.Scheduler.Normal.Outcomes.Succeeded, uint64(3), "jobs ran as seqsched tasks")
	assert.True(t, float64(before.Claimed) <= claimed && claimed <= float64(after.Claimed),
		"claimed_total = %v; want within [%d, %d]", claimed, before.Claimed, after.Claimed)
	b, a := before.Scheduler.Normal.Outcomes.Succeeded, after.Scheduler.Normal.Outcomes.Succeeded
	assert.True(t, float64(b) <= tasks && tasks <= float64(a),
		"tasks_total{normal,succeeded} = %v; want within [%d, %d]", tasks, b, a)
}
