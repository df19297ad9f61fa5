package seqpg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Under WithBatchedCompletion each key's jobs still run one at a time in
// order, every job runs once when nothing fails, the handler gets no
// transaction, and every completion is recorded.
func TestBatchedRunsEachKeyInOrder(t *testing.T) {
	pool, _ := newDB(t)
	const keys, perKey = 5, 23 // not a multiple of the batch
	for i := range perKey {
		for k := range keys {
			enqueue(t, pool, fmt.Sprint("k", k), fmt.Sprint(i))
		}
	}
	r := newRecorder()
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		if tx != nil {
			t.Errorf("tx = %v; want nil under WithBatchedCompletion", tx)
		}
		return r.handler(ctx, tx, job)
	}, seqpg.WithBatchedCompletion(4))
	r.wait(t, keys*perKey)
	want := make([]string, perKey)
	for i := range want {
		want[i] = fmt.Sprint(i)
	}
	for k := range keys {
		assert.Equal(t, want, r.of(fmt.Sprint("k", k)), "key k%d", k)
	}
	eventually(t, "every completion to be recorded", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(bg, `SELECT count(*) FROM seqpg_jobs`).Scan(&n))
		return n == 0 && w.Stats().Completed == keys*perKey
	})
	for k := range keys {
		assert.Zero(t, state(t, pool, fmt.Sprint("k", k)).Pending)
	}
}

// A failure in the middle of a batch records the completions before it,
// then the failure: the failed job runs again, and the jobs before it do
// not.
func TestBatchedFailureKeepsEarlierCompletions(t *testing.T) {
	pool, _ := newDB(t)
	for i := range 6 {
		enqueue(t, pool, "k", fmt.Sprint(i))
	}
	r := newRecorder()
	failed := false
	startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if string(job.Payload) == "2" && !failed {
			failed = true // one key: handler calls are sequential
			return errors.New("once")
		}
		return nil
	}, seqpg.WithBatchedCompletion(10))
	assert.Equal(t, []string{"0", "1", "2", "2", "3", "4", "5"}, r.wait(t, 7))
	eventually(t, "the key to empty", func() bool { return state(t, pool, "k").Pending == 0 })
	assert.Equal(t, []string{"0", "1", "2", "2", "3", "4", "5"}, r.of("k"))
}

// A worker whose lease expired while it held jobs run but not recorded
// records none of them and runs none of the jobs still in hand: they run
// again under the next lease, in order.
func TestBatchedLostLeaseRecordsNothing(t *testing.T) {
	pool, _ := newDB(t)
	for i := range 3 {
		enqueue(t, pool, "k", fmt.Sprint(i))
	}
	r := newRecorder()
	started := make(chan struct{}, 1)
	froze := false
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if string(job.Payload) == "1" && !froze {
			froze = true // one key: handler calls are sequential
			started <- struct{}{}
			<-ctx.Done() // frozen past its lease, which ends its ctx
		}
		return nil
	}, seqpg.WithBatchedCompletion(10), seqpg.WithLease(time.Second))
	<-started
	// The lease expires in the database (as if the worker were frozen
	// past it): renewals and the completion of 0 and 1 are refused.
	_, err := pool.Exec(bg, `UPDATE seqpg_keys SET lease_until = now() - interval '1 second', run_after = now() - interval '1 second' WHERE key = 'k'`)
	require.NoError(t, err)
	assert.Equal(t, []string{"0", "1", "0", "1", "2"}, r.wait(t, 5))
	eventually(t, "the key to empty", func() bool { return state(t, pool, "k").Pending == 0 })
	// Completed counts after the commit returns, which the database shows
	// first.
	eventually(t, "the key's jobs to be counted", func() bool { return w.Stats().Completed == 3 })
	assert.Equal(t, []string{"0", "1", "0", "1", "2"}, r.of("k"))
}

// The completions are fenced in the database too: a worker that still
// believes it holds the key (its clock says so) but whose lease was taken
// over records none of the jobs it ran; they run again, in order, under
// the next lease.
func TestBatchedTakenOverLeaseRecordsNothing(t *testing.T) {
	pool, _ := newDB(t)
	for i := range 3 {
		enqueue(t, pool, "k", fmt.Sprint(i))
	}
	r := newRecorder()
	started, release := make(chan struct{}, 1), make(chan struct{})
	froze := false
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if string(job.Payload) == "1" && !froze {
			froze = true // one key: handler calls are sequential
			started <- struct{}{}
			waitOrDone(ctx, release)
		}
		return nil
	}, seqpg.WithBatchedCompletion(10))
	<-started
	_, err := pool.Exec(bg, `UPDATE seqpg_keys SET lease_token = nextval('seqpg_lease_token'),
		lease_until = now() - interval '1 second', run_after = now() - interval '1 second' WHERE key = 'k'`)
	require.NoError(t, err)
	close(release)
	assert.Equal(t, []string{"0", "1", "2", "0", "1", "2"}, r.wait(t, 6))
	eventually(t, "the key to empty", func() bool { return state(t, pool, "k").Pending == 0 })
	assert.Equal(t, uint64(1), w.Stats().LeaseLost)
	// Completed counts after the commit returns, which the database shows
	// first.
	eventually(t, "the key's jobs to be counted", func() bool { return w.Stats().Completed == 3 })
}

// Replace leaves the jobs a worker has in hand alone, as it leaves a
// running job alone: it enqueues a new job instead, and both run, in
// order. (Rewriting a job in hand would lose the replacement: the
// worker's completion deletes the job by its id.)
func TestBatchedReplaceSkipsJobsInHand(t *testing.T) {
	pool, _ := newDB(t)
	enqueue(t, pool, "k", "A")
	enqueue(t, pool, "k", "B", seqpg.Replace("t"))
	r := newRecorder()
	started, release := make(chan struct{}, 1), make(chan struct{})
	startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		if string(job.Payload) == "A" {
			started <- struct{}{}
			waitOrDone(ctx, release)
		}
		return r.handler(ctx, tx, job)
	}, seqpg.WithBatchedCompletion(10))
	<-started // A and B are in hand
	e := enqueue(t, pool, "k", "B2", seqpg.Replace("t"))
	assert.False(t, e.Replaced)
	close(release)
	assert.Equal(t, []string{"A", "B", "B2"}, r.wait(t, 3))
	eventually(t, "the key to empty", func() bool { return state(t, pool, "k").Pending == 0 })
}

func TestBatchedCompletionBadInput(t *testing.T) {
	pool, _ := newDB(t)
	h := func(context.Context, pgx.Tx, *seqpg.Job) error { return nil }
	for _, n := range []int{0, 1001} {
		_, err := seqpg.NewWorker(pool, h, seqpg.WithBatchedCompletion(n))
		assert.ErrorIs(t, err, seqpg.ErrInvalidOption)
		assert.ErrorContains(t, err, fmt.Sprintf("seqpg: WithBatchedCompletion(%d): must be 1..1000: invalid option", n))
	}
}
