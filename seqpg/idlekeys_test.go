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

// Idle keys cost a claim nothing: seqpg_keys keeps a row for every key
// ever enqueued (a key's row holds its sequence counter, so that its
// order survives its idle spells), and a claim reads the ready keys it
// takes, not every row, under either plan of a prepared statement,
// whatever room it asks for and whatever the planner's statistics say.
// The statistics that broke it are those of an ANALYZE taken while a
// burst had queued a job on most keys: the planner then expects most keys
// to be ready, and the claim joined the keys it took to a sequential scan
// of the whole table (20,000 rows read here to claim 3 keys; 100,000 at
// 100,000 keys).

const (
	// idleKeys have no job; readyKeys have one each.
	idleKeys  = 20000
	readyKeys = 5
	// perKey and fixedKeys bound the rows of seqpg_keys and of its
	// indexes a claim may read: the keys it takes, the index entries
	// that lead to them, and the other ready keys it orders them among.
	perKey    = 4
	fixedKeys = 12
)

func TestClaimReadsOnlyReadyKeysWhateverTheIdleOnes(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	exec := func(sqls ...string) {
		t.Helper()
		for _, sql := range sqls {
			_, err := pool.Exec(ctx, sql)
			require.NoError(t, err, sql)
		}
	}
	// The idle keys, inserted as rows to save the time of 20,000
	// enqueues and completions, and analyzed before any key is ready.
	exec(fmt.Sprintf(`INSERT INTO seqpg_keys (key, last_seq) SELECT 'idle-' || i, 1 FROM generate_series(1, %d) i`, idleKeys),
		`ANALYZE seqpg_keys`)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range readyKeys {
			if _, err := seqpg.Enqueue(ctx, tx, fmt.Sprint("ready-", i), nil); err != nil {
				return err
			}
		}
		return nil
	}))

	check := func(stats string) {
		for _, room := range []int{3, 1000} {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				t.Run(fmt.Sprintf("%s/room=%d/%s", stats, room, mode), func(t *testing.T) {
					read, claimed := claimReads(t, pool, mode, room)
					require.Equal(t, min(room, readyKeys), claimed, "keys claimed")
					limit := int64(perKey*claimed + fixedKeys)
					require.LessOrEqual(t, read, limit,
						"rows of seqpg_keys and its indexes read = %d; want at most %d, with %d idle keys and %d ready",
						read, limit, idleKeys, readyKeys)
				})
			}
		}
	}
	check("analyzed-with-none-ready")
	exec(`ANALYZE seqpg_keys`)
	check("analyzed-fresh")
	// A burst that queued a job on every key, analyzed (as autovacuum
	// does once its writes pass the threshold) before it ran out; then
	// autovacuum's VACUUM, which keeps the statistics.
	exec(`UPDATE seqpg_keys SET pending = 1 WHERE key LIKE 'idle-%'`, `ANALYZE seqpg_keys`,
		`UPDATE seqpg_keys SET pending = 0 WHERE key LIKE 'idle-%'`, `VACUUM seqpg_keys`)
	check("analyzed-during-a-burst")
}

// claimReads runs the claim for room keys in a transaction it rolls back,
// under plan_cache_mode mode, and returns the rows of seqpg_keys and of
// its indexes it read (the transaction's own counts, exact and not yet
// sent to the statistics), and the keys it claimed. It vacuums
// seqpg_keys first, indexes included (VACUUM may skip a table's indexes
// when few of its pages have dead rows): the versions that earlier
// claims rolled back are dead, and their index entries would be counted
// as read.
func claimReads(t *testing.T, pool *pgxpool.Pool, mode string, room int) (read int64, claimed int) {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `VACUUM (INDEX_CLEANUP ON) seqpg_keys`)
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode)
	require.NoError(t, err)
	counted := func() int64 { return tuplesRead(t, tx, "seqpg_keys", "seqpg_keys_pkey", "seqpg_keys_ready") }
	before := counted()
	rows, err := tx.Query(ctx, seqpg.SQLClaim, "test", room, 60000.0)
	require.NoError(t, err)
	for rows.Next() {
		claimed++
	}
	require.NoError(t, rows.Err())
	read = counted() - before
	t.Logf("read %d rows, claimed %d keys", read, claimed)
	return read, claimed
}
