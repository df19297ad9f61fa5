package seqpg_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A failed attempt is retried after the backoff, which is called with the
// attempt that failed; the key's later jobs wait for it.
func TestRetryWithBackoffKeepsOrder(t *testing.T) {
	pool, _ := newDB(t)
	backoffs := make(chan int, 10)
	r := newRecorder()
	startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if string(job.Payload) == "flaky" && job.Attempt < 3 {
			return errors.New("flaky")
		}
		return nil
	}, seqpg.WithRetries(3, func(ctx context.Context, job *seqpg.Job, attempt int, err error) time.Duration {
		backoffs <- attempt
		return 20 * time.Millisecond
	}))
	enqueue(t, pool, "k", "flaky")
	enqueue(t, pool, "k", "after")
	assert.Equal(t, []string{"flaky", "flaky", "flaky", "after"}, r.wait(t, 4))
	assert.Equal(t, 1, <-backoffs)
	assert.Equal(t, 2, <-backoffs)
}

// A retrying key waits out its backoff in the database, holding neither
// its lease nor a place of the worker's: with room for one key at once,
// another key's job runs during the backoff, and neither the failed job
// nor the key's next one runs before the backoff ends.
func TestRetryingKeyBlocksOnlyItself(t *testing.T) {
	pool, _ := newDB(t)
	r := newRecorder()
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if job.Key == "k" {
			return errors.New("down")
		}
		return nil
	}, seqpg.WithMaxConcurrency(1), seqpg.WithRetries(3, func(context.Context, *seqpg.Job, int, error) time.Duration {
		return time.Hour
	}))
	enqueue(t, pool, "k", "fails")
	enqueue(t, pool, "k", "after")
	assert.Equal(t, []string{"fails"}, r.wait(t, 1))
	eventually(t, "the retry to be recorded", func() bool { return w.Stats().Retried >= 1 })
	enqueue(t, pool, "other", "o")
	assert.Equal(t, []string{"o"}, r.wait(t, 1), "a retrying key blocks only itself")
	eventually(t, "the other key to complete", func() bool { return w.Stats().Completed == 1 })
	assert.Equal(t, []string{"fails"}, r.of("k"), "nothing of the key ran again during its backoff")
	assert.Equal(t, seqpg.KeyState{Pending: 2}, state(t, pool, "k"), "the key waits, held by no worker")
}

// After its last attempt a job goes to seqpg_dead, with its attempts and
// last error, and the key goes on with its next job. A Terminal error
// skips the remaining attempts; a panic and runtime.Goexit are failed
// attempts like errors.
func TestDeadLetterAfterLastAttempt(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	r := newRecorder()
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		switch string(job.Payload) {
		case "bad":
			return errors.New("always")
		case "terminal":
			return seqpg.Terminal(errors.New("hopeless"))
		case "panic":
			panic("boom")
		case "goexit":
			runtime.Goexit()
		}
		return nil
	}, seqpg.WithRetries(2, func(context.Context, *seqpg.Job, int, error) time.Duration { return 0 }))
	for _, p := range []string{"bad", "terminal", "panic", "goexit", "good"} {
		enqueue(t, pool, "k", p)
	}
	assert.Equal(t, []string{"bad", "bad", "terminal", "panic", "panic", "goexit", "goexit", "good"}, r.wait(t, 8))
	eventually(t, "the key to empty", func() bool { return state(t, pool, "k").Pending == 0 })

	rows, err := pool.Query(ctx, `SELECT convert_from(payload, 'UTF8'), attempts, error FROM seqpg_dead ORDER BY seq`)
	require.NoError(t, err)
	type dead struct {
		Payload  string
		Attempts int
		Error    string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dead])
	require.NoError(t, err)
	require.Len(t, got, 4)
	assert.Equal(t, dead{"bad", 2, "always"}, got[0])
	assert.Equal(t, dead{"terminal", 1, "hopeless"}, got[1])
	assert.Equal(t, "panic", got[2].Payload)
	assert.Contains(t, got[2].Error, "boom")
	assert.Equal(t, "goexit", got[3].Payload)
	assert.Contains(t, got[3].Error, seqsched.ErrGoexit.Error())
	assert.Equal(t, uint64(4), w.Stats().DeadLettered)
}

// A backoff that panics or calls runtime.Goexit is logged, and
// DefaultBackoff gives the wait: the job is still retried.
func TestPanickingBackoffIsLoggedAndDefaultBackoffUsed(t *testing.T) {
	pool, _ := newDB(t)
	r := newRecorder()
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if job.Attempt < 3 {
			return errors.New("again")
		}
		return nil
	}, seqpg.WithRetries(3, func(ctx context.Context, job *seqpg.Job, attempt int, err error) time.Duration {
		if attempt == 1 {
			panic("backoff down")
		}
		runtime.Goexit()
		return 0
	}))
	enqueue(t, pool, "k", "x")
	assert.Equal(t, []string{"x", "x", "x"}, r.wait(t, 3))
	eventually(t, "the job to complete", func() bool { return w.Stats().Completed == 1 })
	assert.Equal(t, uint64(2), w.Stats().Retried)
}
