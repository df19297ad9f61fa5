package ledger

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client that timed out sends its request again, with the same ID: the
// change is applied once, and the retry gets the first receipt.
func TestRetriedDepositWithARequestIDIsAppliedOnce(t *testing.T) {
	journal := &blockingWriter{open: make(chan struct{})}
	close(journal.open)
	b, db := newBank(t, Config{Journal: journal})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1))

	first := must(t)(b.Deposit(ctx, 1, 50, RequestID("req-1")))
	retry := must(t)(b.Deposit(ctx, 1, 50, RequestID("req-1")))
	other := must(t)(b.Deposit(ctx, 1, 50, RequestID("req-2")))

	assert.Equal(t, Receipt{Op: OpDeposit, Account: 1, Amount: 50, Balance: 150, Version: 1}, first)
	assert.Equal(t, Receipt{Op: OpDeposit, Account: 1, Amount: 50, Balance: 150, Version: 1, Replayed: true}, retry,
		"the retry gets the first receipt, marked Replayed")
	assert.Equal(t, int64(200), other.Balance, "another request ID is another deposit")
	assert.Equal(t, []string{
		"account 1 balance=200 frozen=false version=2",
		"ledger 1/1 deposit 50 -> 150",
		"ledger 1/2 deposit 50 -> 200",
	}, dump(t, db))
	require.NoError(t, b.Close(ctx))
	assert.Equal(t, 2, len(journal.get()), "journal lines: a replay changed nothing, so it has none: %q", journal.get())
}

func TestRetriedTransferWithARequestIDIsAppliedOnce(t *testing.T) {
	b, db := newBank(t, Config{})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1, 2))
	first := must(t)(b.Transfer(ctx, 2, 1, 30, RequestID("t-1")))
	retry := must(t)(b.Transfer(ctx, 2, 1, 30, RequestID("t-1")))
	assert.False(t, first.Replayed)
	first.Replayed = true
	assert.Equal(t, first, retry)
	assert.Equal(t, []string{
		"account 1 balance=130 frozen=false version=1",
		"account 2 balance=70 frozen=false version=1",
		"ledger 1/1 transfer 30 -> 130",
		"ledger 2/1 transfer -30 -> 70",
	}, dump(t, db))
}

// A request that failed recorded nothing: its retry is carried out afresh.
func TestFailedRequestCanBeRetried(t *testing.T) {
	b, _ := newBank(t, Config{})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 10, 1))
	_, err := await(t)(b.Withdraw(ctx, 1, 50, RequestID("w-1")))
	require.ErrorIs(t, err, ErrInsufficientFunds)
	must(t)(b.Deposit(ctx, 1, 100))
	r := must(t)(b.Withdraw(ctx, 1, 50, RequestID("w-1")))
	assert.Equal(t, Receipt{Op: OpWithdraw, Account: 1, Amount: 50, Balance: 60, Version: 2}, r)
}

func TestRequestIDReusedForAnotherOperationIsRefused(t *testing.T) {
	b, db := newBank(t, Config{})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1, 2))
	must(t)(b.Deposit(ctx, 1, 50, RequestID("req-1")))
	before := dump(t, db)
	for name, do := range map[string]func() (Pending, error){
		"another amount":  func() (Pending, error) { return b.Deposit(ctx, 1, 60, RequestID("req-1")) },
		"another op":      func() (Pending, error) { return b.Withdraw(ctx, 1, 50, RequestID("req-1")) },
		"another account": func() (Pending, error) { return b.Deposit(ctx, 2, 50, RequestID("req-1")) },
		"a transfer":      func() (Pending, error) { return b.Transfer(ctx, 1, 2, 50, RequestID("req-1")) },
	} {
		_, err := await(t)(do())
		assert.ErrorIs(t, err, ErrRequestReused, name)
		assert.True(t, strings.Contains(err.Error(), `"req-1": account=1 op=deposit amount=50`), "%s: %v", name, err)
	}
	assert.Equal(t, before, dump(t, db))
}
