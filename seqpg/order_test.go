package seqpg_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitBlocked waits until some backend waits on a lock: the enqueue that
// queues behind an open transaction of the same key.
func waitBlocked(t *testing.T, pool *pgxpool.Pool) {
	eventually(t, "an enqueue blocked on the key's lock", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n))
		return n > 0
	})
}

// Order per key is commit order, not the order of Enqueue calls: B's
// Enqueue, called while A's transaction holds the key, waits for A's
// commit; A2, enqueued by A after B's call began, commits first and runs
// first. A job numbered (or given its ID) when Enqueue is called, before
// the wait, as River orders by ID, would run B before A2.
func TestOrderIsCommitOrder(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	txA, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txA.Rollback(ctx)
	txB, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txB.Rollback(ctx)

	// A enqueues first; B's enqueue waits for A's transaction to end.
	_, err = seqpg.Enqueue(ctx, txA, "k", []byte("A"))
	require.NoError(t, err)
	bDone := make(chan error, 1)
	go func() {
		_, err := seqpg.Enqueue(ctx, txB, "k", []byte("B"))
		if err == nil {
			err = txB.Commit(ctx)
		}
		bDone <- err
	}()
	waitBlocked(t, pool)
	// C, another key, does not wait for A.
	enqueue(t, pool, "other", "C")
	// A2: enqueued after B's call began, committed before B.
	_, err = seqpg.Enqueue(ctx, txA, "k", []byte("A2"))
	require.NoError(t, err)
	require.NoError(t, txA.Commit(ctx))
	require.NoError(t, <-bDone)

	r := newRecorder()
	startWorker(t, pool, r.handler)
	r.wait(t, 4)
	assert.Equal(t, []string{"A", "A2", "B"}, r.of("k"), "the key's jobs in the order their transactions committed")
}

// A rolled-back enqueue leaves no job and no gap that stalls the key.
func TestRolledBackEnqueueLeavesNoJob(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = seqpg.Enqueue(ctx, tx, "k", []byte("gone"))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	enqueue(t, pool, "k", "kept")

	r := newRecorder()
	startWorker(t, pool, r.handler)
	assert.Equal(t, []string{"kept"}, r.wait(t, 1))
	eventually(t, "the key to empty", func() bool { return state(t, pool, "k").Pending == 0 })
	assert.Equal(t, []string{"kept"}, r.of("k"))
}

// Many producers racing on one key, with several workers: jobs run in the
// order their transactions committed. Each producer records its job right
// after Enqueue returns and before it commits; the key's lock makes the
// next Enqueue of the key wait for that commit, so the record's order is
// the commit order.
func TestConcurrentProducersRunInCommitOrder(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	var mu sync.Mutex
	var committed []string
	var wg sync.WaitGroup
	for p := range 8 {
		wg.Go(func() {
			for i := range 25 {
				payload := fmt.Sprintf("p%d-%d", p, i)
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := seqpg.Enqueue(ctx, tx, "k", []byte(payload)); err != nil {
						return err
					}
					mu.Lock()
					committed = append(committed, payload)
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	r := newRecorder()
	for range 3 {
		startWorker(t, pool, r.handler)
	}
	wg.Wait()
	r.wait(t, 200)
	assert.Equal(t, committed, r.of("k"))
}

// Different keys run in parallel: a key whose handler blocks does not
// delay another key's jobs.
func TestBlockedKeyDelaysNoOther(t *testing.T) {
	pool, _ := newDB(t)
	release := make(chan struct{})
	r := newRecorder()
	startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		if job.Key == "stuck" {
			waitOrDone(ctx, release)
		}
		return r.handler(ctx, tx, job)
	})
	enqueue(t, pool, "stuck", "s1")
	enqueue(t, pool, "stuck", "s2")
	for i := range 5 {
		enqueue(t, pool, "free", fmt.Sprint("f", i))
	}
	assert.Equal(t, []string{"f0", "f1", "f2", "f3", "f4"}, r.wait(t, 5))
	close(release)
	assert.Equal(t, []string{"s1", "s2"}, r.wait(t, 2))
}

// A key's backlog runs in order through every way a job's transaction
// begins: after the key's claim, chained onto the previous job's commit,
// and anew after a chain is cut (every 16 jobs); each handler's write
// commits with its own job, and the key is given back with its last job.
func TestBacklogRunsInOrderAcrossChains(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE effects (seq bigint PRIMARY KEY, payload text)`)
	require.NoError(t, err)
	const n = 40
	var want []string
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range n {
			want = append(want, fmt.Sprint(i))
			if _, err := seqpg.Enqueue(ctx, tx, "k", []byte(fmt.Sprint(i))); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	r := newRecorder()
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, job.Seq, job.Payload)
		return err
	})
	assert.Equal(t, want, r.wait(t, n))
	eventually(t, "the key to be given back", func() bool {
		s := state(t, pool, "k")
		return s.Pending == 0 && !s.Leased && w.Stats().Leased == 0
	})
	var effects int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&effects))
	assert.Equal(t, n, effects)
	eventually(t, "every job to be counted", func() bool { return w.Stats().Completed == uint64(n) })
	assert.Equal(t, uint64(1), w.Stats().Claimed, "one lease ran the whole backlog")
}
