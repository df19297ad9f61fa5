package seqpg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Close lets running jobs finish and gives back the keys whose next job
// has not started: another worker runs them, none lost, none twice, each
// key in order. The running jobs return only after Close was called: a
// handler's ctx begins the close without waiting, so that no step of a
// key can run between the call and the release of the handlers.
func TestCloseGivesUnstartedJobsBack(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	const keys, perKey = 4, 3
	for i := range perKey {
		for k := range keys {
			enqueue(t, pool, fmt.Sprint("k", k), fmt.Sprintf("k%d-%d", k, i))
		}
	}
	started, release := make(chan context.Context, keys), make(chan struct{})
	r := newRecorder()
	a, err := seqpg.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		started <- ctx
		waitOrDone(ctx, release)
		return nil
	}, testOpts()...)
	require.NoError(t, err)
	runA := make(chan error, 1)
	go func() { runA <- a.Run(ctx) }()
	var hctx context.Context
	for range keys {
		hctx = <-started
	}
	require.ErrorIs(t, a.Close(hctx), seqsched.ErrWouldDeadlock, "Close begins from a handler's ctx")
	close(release)
	require.NoError(t, a.Close(ctx))
	require.NoError(t, <-runA)
	assert.Equal(t, 0, a.Stats().Leased)
	assert.Equal(t, uint64(keys), a.Stats().Completed, "each key's running job finished, no new one started")

	startWorker(t, pool, r.handler)
	r.wait(t, keys*perKey)
	for k := range keys {
		want := []string{}
		for i := range perKey {
			want = append(want, fmt.Sprintf("k%d-%d", k, i))
		}
		assert.Equal(t, want, r.of(fmt.Sprint("k", k)))
	}
}

// Close's ctx ending cancels the running handlers; the job is not
// completed, and runs again on another worker.
func TestCloseGivesUpAtCtxEnd(t *testing.T) {
	pool, _ := newDB(t)
	started := make(chan struct{})
	a, err := seqpg.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}, testOpts()...)
	require.NoError(t, err)
	runA := make(chan error, 1)
	go func() { runA <- a.Run(context.Background()) }()
	enqueue(t, pool, "k", "x")
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, a.Close(ctx), context.DeadlineExceeded)
	require.NoError(t, <-runA)
	assert.Equal(t, uint64(0), a.Stats().Completed)

	r := newRecorder()
	startWorker(t, pool, r.handler)
	assert.Equal(t, []string{"x"}, r.wait(t, 1))
}

// Run runs once; Close from a handler does not wait for itself.
func TestRunOnceAndCloseFromHandler(t *testing.T) {
	pool, _ := newDB(t)
	errs := make(chan error, 1)
	var w *seqpg.Worker
	w, err := seqpg.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		errs <- w.Close(ctx)
		return nil
	}, testOpts()...)
	require.NoError(t, err)
	run := make(chan error, 1)
	go func() { run <- w.Run(context.Background()) }()
	eventually(t, "the worker to listen", func() bool { return listening(t, pool) })
	assert.ErrorIs(t, w.Run(context.Background()), seqpg.ErrRunning)
	enqueue(t, pool, "k", "x")
	assert.ErrorIs(t, <-errs, seqsched.ErrWouldDeadlock)
	require.NoError(t, <-run)
	assert.ErrorIs(t, w.Run(context.Background()), seqpg.ErrClosed)
	require.NoError(t, w.Close(context.Background()))
}

// Under WithBatchedCompletion, Close records the completions of the jobs
// that ran and gives back the jobs read but not started: another worker
// runs those, in order, and none of those that ran runs again.
func TestBatchedCloseGivesJobsInHandBack(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	for i := range 5 {
		enqueue(t, pool, "k", fmt.Sprint(i))
	}
	started, release := make(chan context.Context, 1), make(chan struct{})
	r := newRecorder()
	a, err := seqpg.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if string(job.Payload) == "1" {
			started <- ctx
			waitOrDone(ctx, release)
		}
		return nil
	}, testOpts(seqpg.WithBatchedCompletion(10))...)
	require.NoError(t, err)
	runA := make(chan error, 1)
	go func() { runA <- a.Run(ctx) }()
	hctx := recv(t, started, "job 1 to start")
	require.ErrorIs(t, a.Close(hctx), seqsched.ErrWouldDeadlock, "Close begins from a handler's ctx")
	close(release)
	require.NoError(t, a.Close(ctx))
	require.NoError(t, <-runA)
	assert.Equal(t, uint64(2), a.Stats().Completed, "the two jobs that ran were recorded")
	assert.Equal(t, seqpg.KeyState{Pending: 3}, state(t, pool, "k"), "the jobs in hand are given back")

	startWorker(t, pool, r.handler)
	r.wait(t, 5)
	assert.Equal(t, []string{"0", "1", "2", "3", "4"}, r.of("k"))
}
