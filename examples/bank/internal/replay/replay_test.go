package replay

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqsched/seqsched/examples/bank/internal/ledger"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestOrderedReplayEndsEveryBalanceAtZero(t *testing.T) {
	ctx := context.Background()
	db, err := ledger.OpenDB(ctx, filepath.Join(t.TempDir(), "bank.db"))
	require.NoError(t, err)
	defer db.Close()
	b, err := ledger.New(db, ledger.Config{})
	require.NoError(t, err)

	res, err := Run(ctx, b, Config{Accounts: 100, Traffic: 10, Workers: 4, Window: 5, Seed: 1})
	require.NoError(t, b.Close(ctx))
	require.NoError(t, err)
	assert.Empty(t, res.Failures)
	assert.Equal(t, 600, res.Ops, "3 steps and 3 traffic operations per account")
	assert.Equal(t, 600, res.Stats.Ops, "operations completed before the final check")

	var n, sum int64
	require.NoError(t, db.QueryRow(`SELECT count(*), sum(balance) FROM accounts WHERE id <= 100`).Scan(&n, &sum))
	assert.Equal(t, [2]int64{100, 0}, [2]int64{n, sum})
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM ledger WHERE account <= 100`).Scan(&n))
	assert.Equal(t, int64(300), n, "every step is in the ledger; traffic never touches these accounts")
}

func TestRunRejectsBadConfig(t *testing.T) {
	_, err := Run(context.Background(), nil, Config{Accounts: 1, Traffic: 1, Workers: 1, Window: 1})
	assert.ErrorContains(t, err, "Traffic >= 2")
}

func TestResultCountsFailedAccounts(t *testing.T) {
	res := Result{Failures: []Failure{{1, "a"}, {1, "b"}, {4, "c"}, {7, "d"}, {7, "e"}}}
	assert.Equal(t, 3, res.Accounts())
	assert.Equal(t, 0, Result{}.Accounts())
}
