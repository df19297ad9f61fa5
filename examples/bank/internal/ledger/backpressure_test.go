package ledger

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched"
)

// An account whose queue is full refuses more at once, with an error the
// caller can answer "busy" to, instead of holding a backlog without bound.
func TestFullAccountQueueRefusesAtOnce(t *testing.T) {
	b, _ := newBank(t, Config{MaxQueue: 2})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1, 2))
	release := gate(t, b, 1)
	d1, err1 := b.Deposit(ctx, 1, 1)
	d2, err2 := b.Deposit(ctx, 1, 2)
	_, err := b.Deposit(ctx, 1, 4)
	require.ErrorIs(t, err, seqsched.ErrQueueFull)
	var opErr *OpError
	require.ErrorAs(t, err, &opErr)
	assert.EqualError(t, err, "deposit 4 on account 1: seqsched: queue full")
	must(t)(b.Deposit(ctx, 2, 1)) // other accounts go on
	release()
	must(t)(d1, err1)
	assert.Equal(t, int64(103), must(t)(d2, err2).Balance, "the refused deposit never ran")
}

// A transfer refused by either account's full queue changes neither, and
// its half on the other account resolves at once.
func TestTransferRefusedByAFullQueueChangesNeitherAccount(t *testing.T) {
	for _, full := range []AccountID{1, 2} { // the lower ID's half is submitted second
		b, db := newBank(t, Config{MaxQueue: 1})
		ctx := context.Background()
		require.NoError(t, b.CreateAccounts(ctx, 100, 1, 2))
		release := gate(t, b, full)
		d, derr := b.Deposit(ctx, full, 1) // fills its queue
		_, err := b.Transfer(ctx, 1, 2, 10)
		require.ErrorIs(t, err, seqsched.ErrQueueFull, "account %d full", full)
		release()
		must(t)(d, derr)
		require.NoError(t, b.Close(ctx), "account %d full: a half left waiting", full)
		assert.Equal(t, int64(100), balanceIn(t, db, 3-full), "account %d full", full)
	}
}

func TestNegativeMaxQueueIsRefused(t *testing.T) {
	_, err := New(nil, Config{MaxQueue: -1})
	require.EqualError(t, err, "ledger: Config.MaxQueue -1: must be 0 (the default) or more")
}

// balanceIn reads id's balance from the database.
func balanceIn(t *testing.T, db *sql.DB, id AccountID) int64 {
	t.Helper()
	var balance int64
	require.NoError(t, db.QueryRow(`SELECT balance FROM accounts WHERE id = $1`, int64(id)).Scan(&balance))
	return balance
}
