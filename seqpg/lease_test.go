package seqpg_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	}, seqpg.WithMaxConcurrency(1)) // A has no room to claim the key back itself: B takes it
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
	// A's refused completion aborted its transaction, which let B go on,
	// before A counted it.
	eventually(t, "A to count its lost lease", func() bool { return a.Stats().LeaseLost == 1 })
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
	}, seqpg.WithMaxConcurrency(1)) // no room to claim the key again while the first attempt runs
	enqueue(t, pool, "k", "x")
	<-started
	_, err := pool.Exec(ctx, `UPDATE seqpg_keys SET lease_until = now() - interval '1 second', run_after = now() - interval '1 second' WHERE key = 'k'`)
	require.NoError(t, err)
	close(release)
	eventually(t, "the job to complete", func() bool { return state(t, pool, "k").Pending == 0 })
	// A rolled back before it tried to record the failure: the job may
	// complete before A counts the refusal.
	eventually(t, "A to count its lost lease", func() bool { return a.Stats().LeaseLost == 1 })
	assert.Equal(t, 1, <-attempts)
	assert.Equal(t, 1, <-attempts, "the lost failure was not recorded")
	var dead int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM seqpg_dead`).Scan(&dead))
	assert.Equal(t, 0, dead)
}

// A key whose lease expires locally between its steps, while the
// database still holds it (the renewals were skipped: another transaction
// held the key's row), is given up without being given back: it waits
// for its lease to run out in the database. That stall is logged at Warn,
// with the key, the token and why, and counted in Stats.LeaseExpired.
func TestExpiredLeaseIsLoggedAndCounted(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	logs := &records{}
	var calls atomic.Int32
	started := make(chan int64, 1)
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		if calls.Add(1) == 1 {
			f, _ := seqpg.LeaseOf(ctx)
			started <- f.Token
			<-ctx.Done() // the lease expired locally
		}
		return nil // a success whose next step comes after the lease
	}, seqpg.WithBatchedCompletion(10), seqpg.WithLease(time.Second), seqpg.WithLogger(slog.New(logs)))
	enqueue(t, pool, "k", "x")
	first := <-started
	// The key's row is locked: renewals skip it, and so do claims.
	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer lock.Rollback(ctx)
	_, err = lock.Exec(ctx, `SELECT 1 FROM seqpg_keys WHERE key = 'k' FOR UPDATE`)
	require.NoError(t, err)

	eventually(t, "the expired lease to be counted", func() bool { return w.Stats().LeaseExpired == 1 })
	require.NoError(t, lock.Commit(ctx))
	eventually(t, "the job to complete", func() bool { return state(t, pool, "k").Pending == 0 })
	assert.Equal(t, uint64(1), w.Stats().LeaseExpired)
	assert.Equal(t, uint64(0), w.Stats().LeaseLost)
	assert.Equal(t, int32(2), calls.Load(), "the job ran again under the next lease")
	got := logs.find("seqpg: lease expired locally; the key waits for its lease to expire in the database")
	require.Len(t, got, 1)
	assert.Equal(t, slog.LevelWarn, got[0].level)
	assert.Equal(t, "k", got[0].attrs["key"])
	assert.Equal(t, first, got[0].attrs["token"])
	assert.Equal(t, "the lease expired unrenewed before the key's next step", got[0].attrs["why"])
}

// records is a slog handler that keeps every record.
type records struct {
	mu  sync.Mutex
	all []record
}

type record struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	attrs := map[string]any{}
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.Any()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, record{rec.Level, rec.Message, attrs})
	return nil
}

// find returns the records with message msg.
func (r *records) find(msg string) []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []record
	for _, rec := range r.all {
		if rec.msg == msg {
			out = append(out, rec)
		}
	}
	return out
}
