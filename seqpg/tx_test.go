package seqpg_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A handler's writes in the job's transaction commit with the job's
// completion: a failed attempt leaves none of them, the successful one
// leaves them exactly once.
func TestHandlerWritesCommitWithCompletion(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE effects (job bigint, attempt int)`)
	require.NoError(t, err)
	r := newRecorder()
	startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, job.ID, job.Attempt); err != nil {
			return err
		}
		r.add(job)
		if job.Attempt < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	e := enqueue(t, pool, "k", "x")
	r.wait(t, 3)
	eventually(t, "the job to complete", func() bool { return state(t, pool, "k").Pending == 0 })
	var attempts []int
	rows, err := pool.Query(ctx, `SELECT attempt FROM effects WHERE job = $1`, e.ID)
	require.NoError(t, err)
	attempts, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	assert.Equal(t, []int{3}, attempts)
}

// Enqueue in a handler's transaction: the follow-up exists only if the
// job completes, and runs after it.
func TestEnqueueFromHandlerCommitsWithCompletion(t *testing.T) {
	pool, _ := newDB(t)
	r := newRecorder()
	startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if string(job.Payload) == "first" {
			if _, err := seqpg.Enqueue(ctx, tx, "k", []byte("follow-up")); err != nil {
				return err
			}
			if _, err := seqpg.Enqueue(ctx, tx, "k2", []byte("elsewhere")); err != nil {
				return err
			}
			if job.Attempt == 1 {
				return errors.New("roll the follow-ups back once")
			}
		}
		return nil
	})
	enqueue(t, pool, "k", "first")
	got := r.wait(t, 4)
	assert.ElementsMatch(t, []string{"first", "first", "follow-up", "elsewhere"}, got)
	assert.Equal(t, []string{"first", "first", "follow-up"}, r.of("k"))
}

// Bad input gets a clear error wrapping a sentinel.
func TestEnqueueBadInput(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	_, err := seqpg.Enqueue(ctx, nil, "k", nil)
	assert.ErrorIs(t, err, seqpg.ErrNilTx)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = seqpg.Enqueue(ctx, tx, "", nil)
	assert.ErrorIs(t, err, seqpg.ErrInvalidKey)
	_, err = seqpg.Enqueue(ctx, tx, "a\x00b", nil)
	assert.ErrorIs(t, err, seqpg.ErrInvalidKey)
	_, err = seqpg.Enqueue(ctx, tx, "\xff", nil)
	assert.ErrorIs(t, err, seqpg.ErrInvalidKey)
	//lint:ignore SA1012 testing the nil check
	_, err = seqpg.Enqueue(nil, tx, "k", nil) //nolint:staticcheck
	assert.ErrorIs(t, err, seqpg.ErrNilContext)

	_, err = seqpg.NewWorker(pool, nil)
	assert.ErrorIs(t, err, seqpg.ErrNilHandler)
	_, err = seqpg.NewWorker(pool, func(context.Context, pgx.Tx, *seqpg.Job) error { return nil },
		seqpg.WithMaxConcurrency(0), seqpg.WithLease(0))
	assert.ErrorIs(t, err, seqpg.ErrInvalidOption)
	assert.ErrorContains(t, err, "seqpg: WithMaxConcurrency(0): must be >= 1: invalid option")
	assert.ErrorContains(t, err, "seqpg: WithLease(0s): must be >= 100ms: invalid option")
}

// Migrate is idempotent and refuses a database from a newer seqpg.
func TestMigrateTwiceAndNewer(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	require.NoError(t, seqpg.Migrate(ctx, pool))
	_, err := pool.Exec(ctx, `INSERT INTO seqpg_migrations (version) VALUES (1000)`)
	require.NoError(t, err)
	assert.ErrorIs(t, seqpg.Migrate(ctx, pool), seqpg.ErrSchemaNewer)
}

// A key is at most MaxKeyBytes: a longer one is refused before it reaches
// the database, so the caller's transaction is not aborted and its own
// writes still commit; a key of exactly MaxKeyBytes is a key like any.
func TestEnqueueRefusesAKeyLongerThanMaxKeyBytesAndLeavesTheTxUsable(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE business (n int)`)
	require.NoError(t, err)
	r := newRecorder()
	startWorker(t, pool, r.handler)

	long := strings.Repeat("é", seqpg.MaxKeyBytes/2) // MaxKeyBytes bytes
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = seqpg.Enqueue(ctx, tx, long+"x", []byte("too long"))
	require.ErrorIs(t, err, seqpg.ErrInvalidKey)
	// Past PostgreSQL's B-tree entry limit (2,704 bytes after compression,
	// so base64 of hashes, which does not compress), the INSERT itself
	// would fail and abort tx.
	var raw []byte
	for i := 0; len(raw) < 3*seqpg.MaxKeyBytes; i++ {
		sum := sha256.Sum256([]byte{byte(i)})
		raw = append(raw, sum[:]...)
	}
	_, err = seqpg.Enqueue(ctx, tx, base64.RawStdEncoding.EncodeToString(raw), []byte("far too long"))
	require.ErrorIs(t, err, seqpg.ErrInvalidKey)
	assert.Less(t, len(err.Error()), 300, "the error names the key cut short: %.300s", err)
	_, err = tx.Exec(ctx, `INSERT INTO business VALUES (1)`)
	require.NoError(t, err, "the refused Enqueue left the transaction usable")
	_, err = seqpg.Enqueue(ctx, tx, long, []byte("at the bound"))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	assert.Equal(t, []string{"at the bound"}, r.wait(t, 1))
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM business`).Scan(&n))
	assert.Equal(t, 1, n)
	for _, err := range []error{seqpg.Pause(ctx, pool, long+"x"), seqpg.Resume(ctx, pool, long+"x")} {
		assert.ErrorIs(t, err, seqpg.ErrInvalidKey)
	}
}
