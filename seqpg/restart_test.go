package seqpg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seqsched/seqsched/internal/pgtest"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The server crashes (SIGQUIT: no checkpoint) and restarts under a
// running worker: committed jobs survive, the worker reconnects (its pool,
// its LISTEN) and runs them, each key in order, each job's effect once.
func TestServerRestartUnderWorker(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE effects (key text, payload text, at bigserial)`)
	require.NoError(t, err)
	crashed := make(chan struct{})
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		waitOrDone(ctx, crashed)
		_, err := tx.Exec(ctx, `INSERT INTO effects (key, payload) VALUES ($1, $2)`, job.Key, job.Payload)
		return err
	}, seqpg.WithLease(time.Second))
	for i := range 5 {
		for _, key := range []string{"a", "b"} {
			enqueue(t, pool, key, fmt.Sprint(key, i))
		}
	}
	eventually(t, "the worker to hold both keys", func() bool { return w.Stats().Leased == 2 })
	server := pgtest.Shared(t)
	server.Kill()
	close(crashed)
	require.NoError(t, server.Restart())

	eventually(t, "every job to complete", func() bool {
		var n int
		return pool.QueryRow(ctx, `SELECT count(*) FROM seqpg_jobs`).Scan(&n) == nil && n == 0
	})
	rows, err := pool.Query(ctx, `SELECT key, payload FROM effects ORDER BY at`)
	require.NoError(t, err)
	got := map[string][]string{}
	for rows.Next() {
		var k, p string
		require.NoError(t, rows.Scan(&k, &p))
		got[k] = append(got[k], p)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []string{"a0", "a1", "a2", "a3", "a4"}, got["a"])
	assert.Equal(t, []string{"b0", "b1", "b2", "b3", "b4"}, got["b"])
	assert.Positive(t, w.Stats().DBErrors, "the crash was seen")
}
