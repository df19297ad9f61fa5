package seqpg_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/require"
)

// Cheap at depth: what a held key's step does to its jobs (read the next
// ones, complete, retry, halt, dead-letter, and Discard's delete) finds
// them by index lookups that touch a few rows per job it handles,
// whatever else is queued in the key or in others, under either plan of
// a prepared statement, and whatever the planner's statistics say. The
// statistics that once broke it are the ones a queue table is most often
// left with: autovacuum's ANALYZE after a burst ran out records
// seqpg_jobs as empty on all its pages, and the planner took the next
// burst's thousands of jobs for one row, with plans that scanned them
// all per statement, or once per job returned (issue 48's stall: 300
// jobs/s instead of 8,000).

const (
	// otherJobs are queued in other keys, and keyJobs in the key whose
	// first jobs are handled: neither may be read.
	otherJobs = 2000
	keyJobs   = 200
	// perJob and fixed bound the rows of seqpg_jobs and of its indexes a
	// statement may read: the rows it handles, the index entries that
	// lead to them, and a few neighbours.
	perJob = 4
	fixed  = 12
)

func TestKeyStepsReadOnlyTheirJobsAfterAnEmptyAnalyze(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	burst := func(key func(i int) string, n int) {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for i := range n {
				if _, err := seqpg.Enqueue(ctx, tx, key(i), nil); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	// A burst that ran out, analyzed empty as autovacuum does after the
	// last completion; then the next burst, and the key held as a claim
	// leaves it.
	other := func(i int) string { return fmt.Sprint("other-", i%200) }
	burst(other, otherJobs)
	for _, sql := range []string{`DELETE FROM seqpg_jobs`, `UPDATE seqpg_keys SET pending = 0`, `ANALYZE seqpg_jobs, seqpg_keys`} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	var tuples float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE relname = 'seqpg_jobs'`).Scan(&tuples))
	require.Zero(t, tuples, "seqpg_jobs analyzed empty")
	burst(other, otherJobs)
	burst(func(int) string { return "k" }, keyJobs)
	const token = 7
	_, err := pool.Exec(ctx, `UPDATE seqpg_keys SET lease_owner = 'test', lease_token = $1,
		lease_until = clock_timestamp() + interval '1 hour', run_after = clock_timestamp() + interval '1 hour'
		WHERE key = 'k'`, token)
	require.NoError(t, err)
	var first int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(id) FROM seqpg_jobs WHERE key = 'k'`).Scan(&first))
	ten := make([]int64, 10)
	for i := range ten {
		ten[i] = first + int64(i)
	}
	statement := func(sql string, args ...any) func(pgx.Tx) (int, error) {
		return func(tx pgx.Tx) (int, error) {
			rows, err := tx.Query(ctx, sql, args...)
			if err != nil {
				return 0, err
			}
			n := 0
			for rows.Next() {
				n++
			}
			return n, rows.Err()
		}
	}

	for _, st := range []struct {
		name    string
		run     func(pgx.Tx) (int, error) // returns the rows it returned
		rows    int
		handles int // jobs it reads, locks, changes or deletes
	}{
		{"head", statement(seqpg.SQLHead, "k", token), 1, 1},
		{"done and next", statement(seqpg.SQLDoneNext, "k", token, first), 1, 2},
		{"settle", statement(seqpg.SQLSettle, "k", token, first, 1000.0, 1), 1, 1},
		{"batched fetch", statement(seqpg.SQLFetch, "k", token, 10), 10, 10},
		{"batched completion", statement(seqpg.SQLCompleteBatch, "k", token, ten, 1000.0), 1, 10},
		{"retry", statement(seqpg.SQLRetry, "k", token, first, "failed", 1000.0), 1, 1},
		{"halt", statement(seqpg.SQLHalt, "k", token, first, "failed"), 1, 1},
		{"dead", statement(seqpg.SQLDead, "k", token, first, "failed", 1000.0), 1, 1},
		{"discard", func(tx pgx.Tx) (int, error) {
			n, err := seqpg.Discard(ctx, tx, "k")
			return int(n), err
		}, keyJobs, keyJobs},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			t.Run(st.name+"/"+mode, func(t *testing.T) {
				read, rows := readRows(t, pool, mode, st.run)
				require.Equal(t, st.rows, rows, "rows returned")
				limit := int64(perJob*st.handles + fixed)
				require.LessOrEqual(t, read, limit,
					"rows of seqpg_jobs and its indexes read = %d; want at most %d, with %d other jobs and %d of the key queued",
					read, limit, otherJobs, keyJobs)
			})
		}
	}
}

// readRows runs run in a transaction it rolls back, under plan_cache_mode
// mode, six times so that force_generic_plan's plan is the one measured
// (pgx prepares each statement), and returns the rows of seqpg_jobs and
// of its indexes its last run read (the transaction's own counts, exact
// and not yet sent to the statistics), and what it returned.
func readRows(t *testing.T, pool *pgxpool.Pool, mode string, run func(pgx.Tx) (int, error)) (read int64, returned int) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode)
	require.NoError(t, err)
	counted := func() int64 { return tuplesRead(t, tx, "seqpg_jobs", "seqpg_jobs_pkey", "seqpg_jobs_order") }
	for range 6 {
		_, err := tx.Exec(ctx, "SAVEPOINT s")
		require.NoError(t, err)
		before := counted()
		returned, err = run(tx)
		require.NoError(t, err)
		read = counted() - before
		_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s")
		require.NoError(t, err)
	}
	t.Logf("read %d rows, returned %d", read, returned)
	return read, returned
}

// tuplesRead returns the rows of the relations rels (tables and indexes)
// that tx has read so far: its own counts, exact and not yet sent to the
// statistics.
func tuplesRead(t *testing.T, tx pgx.Tx, rels ...string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, tx.QueryRow(context.Background(), `
SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(oid)), 0)::bigint FROM pg_class
WHERE relname = ANY ($1)`, rels).Scan(&n))
	return n
}
