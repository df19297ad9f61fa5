package seqpg_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	for _, o := range []seqpg.Option{seqpg.WithGroupCommit(0, time.Second), seqpg.WithGroupCommit(33, time.Second), seqpg.WithGroupCommit(1, 0)} {
		_, err = seqpg.NewWorker(pool, func(context.Context, pgx.Tx, *seqpg.Job) error { return nil }, o)
		assert.ErrorIs(t, err, seqpg.ErrInvalidOption)
		assert.ErrorContains(t, err, "seqpg: "+o.String()+": n must be 1..32 and maxDelay > 0: invalid option")
	}
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

// enqueueAll adds payloads to key in one transaction, so that a worker
// finds them all at once and runs them in one group.
func enqueueAll(t testing.TB, pool *pgxpool.Pool, key string, payloads ...string) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		for _, p := range payloads {
			if _, err := seqpg.Enqueue(context.Background(), tx, key, []byte(p)); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
}

// effects returns the payloads in the effects table, in insertion order.
func effects(t testing.TB, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT payload FROM effects ORDER BY id`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}

func createEffects(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `CREATE TABLE effects (id bigserial PRIMARY KEY, payload text)`)
	require.NoError(t, err)
}

// A job that fails inside a group of its key's jobs rolls back its own
// writes alone, whichever way its handler first used tx: the jobs before
// it in the group run once and keep theirs, committed with the failure,
// and it runs again after the backoff.
func TestFailedJobInGroupRollsBackAlone(t *testing.T) {
	const insert = `INSERT INTO effects (payload) VALUES ($1)`
	for name, write := range map[string]func(ctx context.Context, tx pgx.Tx, p string) error{
		"exec": func(ctx context.Context, tx pgx.Tx, p string) error {
			_, err := tx.Exec(ctx, insert, p)
			return err
		},
		"exec-without-args": func(ctx context.Context, tx pgx.Tx, p string) error {
			_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO effects (payload) VALUES ('%s')`, p))
			return err
		},
		"exec-simple-protocol": func(ctx context.Context, tx pgx.Tx, p string) error {
			_, err := tx.Exec(ctx, insert, pgx.QueryExecModeSimpleProtocol, p)
			return err
		},
		"query-row": func(ctx context.Context, tx pgx.Tx, p string) error {
			var id int64
			return tx.QueryRow(ctx, insert+` RETURNING id`, p).Scan(&id)
		},
		"batch": func(ctx context.Context, tx pgx.Tx, p string) error {
			b := &pgx.Batch{}
			b.Queue(insert, p)
			return tx.SendBatch(ctx, b).Close()
		},
		"nested": func(ctx context.Context, tx pgx.Tx, p string) error {
			return pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, insert, p)
				return err
			})
		},
	} {
		t.Run(name, func(t *testing.T) {
			pool, _ := newDB(t)
			createEffects(t, pool)
			enqueueAll(t, pool, "k", "a", "b", "c")
			r := newRecorder()
			startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
				r.add(job)
				if err := write(ctx, tx, fmt.Sprintf("%s/%d", job.Payload, job.Attempt)); err != nil {
					return err
				}
				if string(job.Payload) == "b" && job.Attempt == 1 {
					return errors.New("b fails once")
				}
				return nil
			}, seqpg.WithGroupCommit(16, time.Hour))
			assert.Equal(t, []string{"a", "b", "b", "c"}, r.wait(t, 4))
			eventually(t, "the key to end", func() bool { return state(t, pool, "k").Pending == 0 })
			assert.Equal(t, []string{"a/1", "b/2", "c/1"}, effects(t, pool))
		})
	}
}

// A group commits every n jobs: while a key's third job runs, the writes
// of the two before it are visible under WithGroupCommit(2, ...), and
// not yet under WithGroupCommit(16, ...), whose group is still open.
func TestGroupCommitsEveryNJobs(t *testing.T) {
	for _, n := range []int{2, 16} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			pool, _ := newDB(t)
			createEffects(t, pool)
			enqueueAll(t, pool, "k", "1", "2", "3")
			third, release := make(chan struct{}), make(chan struct{})
			w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
				if string(job.Payload) == "3" {
					close(third)
					waitOrDone(ctx, release)
				}
				_, err := tx.Exec(ctx, `INSERT INTO effects (payload) VALUES ($1)`, string(job.Payload))
				return err
			}, seqpg.WithGroupCommit(n, time.Hour))
			<-third
			want := []string{"1", "2"}
			if n > 2 {
				want = []string{}
			}
			assert.Equal(t, want, effects(t, pool), "visible while job 3 runs")
			close(release)
			// Completed counts after the commit returns, which the
			// database shows first.
			eventually(t, "the key's jobs to be counted", func() bool { return w.Stats().Completed == 3 })
			assert.Equal(t, []string{"1", "2", "3"}, effects(t, pool))
		})
	}
}

// The handler's tx cannot end the job's transaction: Commit and Rollback
// return ErrJobTx and change nothing; a nested transaction (a savepoint)
// works as pgx's does; the writes commit with the job.
func TestHandlerTxIsTheJobs(t *testing.T) {
	pool, _ := newDB(t)
	createEffects(t, pool)
	enqueueAll(t, pool, "k", "1", "2")
	r := newRecorder()
	var errs []error
	startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects (payload) VALUES ($1)`, string(job.Payload)); err != nil {
			return err
		}
		nested := pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO effects (payload) VALUES ('nested')`); err != nil {
				return err
			}
			return errors.New("roll the nested one back")
		})
		errs = append(errs, nested, tx.Commit(ctx), tx.Rollback(ctx))
		r.add(job)
		return nil
	})
	r.wait(t, 2)
	eventually(t, "the key to end", func() bool { return state(t, pool, "k").Pending == 0 })
	assert.Equal(t, []string{"1", "2"}, effects(t, pool))
	require.Len(t, errs, 6)
	for i := 0; i < len(errs); i += 3 {
		assert.EqualError(t, errs[i], "roll the nested one back")
		assert.ErrorIs(t, errs[i+1], seqpg.ErrJobTx)
		assert.ErrorIs(t, errs[i+2], seqpg.ErrJobTx)
	}
}

// The handler's tx ends with its handler: a tx kept past it (handed to a
// goroutine that outlives the handler) returns ErrJobTx from every method,
// and nothing it is asked to write lands in the key's later jobs, which
// share its group's transaction.
func TestHandlerTxKeptPastItsHandlerWritesNothing(t *testing.T) {
	pool, _ := newDB(t)
	createEffects(t, pool)
	enqueueAll(t, pool, "k", "1", "2")
	kept := make(chan pgx.Tx, 1)
	second := make(chan struct{}) // job 2's handler is running
	running := sync.OnceFunc(func() { close(second) })
	release := make(chan struct{})
	r := newRecorder()
	startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects (payload) VALUES ($1)`, string(job.Payload)); err != nil {
			return err
		}
		switch string(job.Payload) {
		case "1":
			kept <- tx
		case "2":
			running()
			<-release
		}
		r.add(job)
		return nil
	})
	tx := <-kept
	<-second // job 1's handler has returned; job 2's runs in its group
	ctx := context.Background()
	_, err := tx.Exec(ctx, `INSERT INTO effects (payload) VALUES ('late')`)
	assert.ErrorIs(t, err, seqpg.ErrJobTx, "Exec")
	_, err = tx.Exec(ctx, `INSERT INTO effects (payload) VALUES ($1)`, "late with args")
	assert.ErrorIs(t, err, seqpg.ErrJobTx, "Exec with arguments")
	var n int
	assert.ErrorIs(t, tx.QueryRow(ctx, `SELECT 1`).Scan(&n), seqpg.ErrJobTx, "QueryRow")
	_, err = tx.Query(ctx, `SELECT 1`)
	assert.ErrorIs(t, err, seqpg.ErrJobTx, "Query")
	_, err = tx.Begin(ctx)
	assert.ErrorIs(t, err, seqpg.ErrJobTx, "Begin")
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO effects (payload) VALUES ('late batch')`)
	assert.ErrorIs(t, tx.SendBatch(ctx, b).Close(), seqpg.ErrJobTx, "SendBatch")
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"effects"}, []string{"payload"}, pgx.CopyFromRows([][]any{{"late copy"}}))
	assert.ErrorIs(t, err, seqpg.ErrJobTx, "CopyFrom")
	_, err = tx.Prepare(ctx, "late", `SELECT 1`)
	assert.ErrorIs(t, err, seqpg.ErrJobTx, "Prepare")
	assert.PanicsWithValue(t, "seqpg: Conn of the handler's tx after its handler returned", func() { tx.Conn() })
	assert.PanicsWithValue(t, "seqpg: LargeObjects of the handler's tx after its handler returned", func() { tx.LargeObjects() })
	close(release)
	r.wait(t, 2)
	eventually(t, "the key to end", func() bool { return state(t, pool, "k").Pending == 0 })
	assert.Equal(t, []string{"1", "2"}, effects(t, pool))
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
