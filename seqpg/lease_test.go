package seqpg_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A worker whose lease expired while its handler ran can neither complete
// the job nor record its failure: its transaction is rolled back, and the
// worker that took the key over runs the job, with a larger token, and
// its effect is applied once.
func TestLostLeaseCannotComplete(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE effects (job bigint PRIMARY KEY, token bigint)`)
	require.NoError(t, err)

	started, release := make(chan seqpg.Fence, 1), make(chan struct{})
	effect := func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		f, ok := seqpg.LeaseOf(ctx)
		if !ok || f.Key != job.Key {
			t.Errorf("LeaseOf = %v, %v", f, ok)
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, job.ID, f.Token)
		return err
	}
	a := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		if err := effect(ctx, tx, job); err != nil {
			return err
		}
		f, _ := seqpg.LeaseOf(ctx)
		started <- f
		waitOrDone(ctx, release) // frozen past its lease
		return nil
	})
	e := enqueue(t, pool, "k", "x")
	fa := <-started

	// The lease expires (as if A were frozen past it); A's renewals are
	// refused from now on.
	_, err = pool.Exec(ctx, `UPDATE seqpg_keys SET lease_until = now() - interval '1 second', run_after = now() - interval '1 second' WHERE key = 'k'`)
	require.NoError(t, err)
	tokens := make(chan int64, 1)
	b := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		f, _ := seqpg.LeaseOf(ctx)
		tokens <- f.Token
		return effect(ctx, tx, job)
	})
	// B has claimed the key (a new token); it waits for A's row lock.
	eventually(t, "B to claim the key", func() bool { return b.Stats().Claimed == 1 })
	close(release)

	fb := <-tokens
	assert.Greater(t, fb, fa.Token)
	eventually(t, "the job to complete", func() bool { return state(t, pool, "k").Pending == 0 })
	assert.Equal(t, uint64(1), a.Stats().LeaseLost)
	assert.Equal(t, uint64(0), a.Stats().Completed)
	assert.Equal(t, uint64(1), b.Stats().Completed)
	var token int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM effects WHERE job = $1`, e.ID).Scan(&token))
	assert.Equal(t, fb, token, "the effect is B's, once")
}

// A lease lost by a handler that fails cannot record the failure either:
// the next run of the job is still its first attempt, and nothing went to
// the dead-letter table.
func TestLostLeaseCannotFail(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	started, release := make(chan struct{}, 1), make(chan struct{})
	attempts := make(chan int, 2)
	a := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		attempts <- job.Attempt
		if len(attempts) == 1 {
			started <- struct{}{}
			waitOrDone(ctx, release)
			return seqpg.Terminal(assert.AnError)
		}
		return nil
	})
	enqueue(t, pool, "k", "x")
	<-started
	_, err := pool.Exec(ctx, `UPDATE seqpg_keys SET lease_until = now() - interval '1 second', run_after = now() - interval '1 second' WHERE key = 'k'`)
	require.NoError(t, err)
	close(release)
	eventually(t, "the job to complete", func() bool { return state(t, pool, "k").Pending == 0 })
	assert.Equal(t, uint64(1), a.Stats().LeaseLost)
	assert.Equal(t, 1, <-attempts)
	assert.Equal(t, 1, <-attempts, "the lost failure was not recorded")
	var dead int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM seqpg_dead`).Scan(&dead))
	assert.Equal(t, 0, dead)
}
