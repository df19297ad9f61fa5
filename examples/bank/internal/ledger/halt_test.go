package ledger

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched"
)

// newHaltingBank opens a bank with HaltWithdrawals whose halts arrive on
// the returned channel.
func newHaltingBank(t *testing.T) (*Bank, <-chan error) {
	t.Helper()
	halts := make(chan error, 10)
	b, _ := newBank(t, Config{HaltWithdrawals: true, OnHalt: func(id AccountID, err error) { halts <- err }})
	return b, halts
}

// pending reports whether p has not resolved yet, without waiting.
func pending(p Pending) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Await(ctx) // a resolved Pending answers whatever ctx says
	return errors.Is(err, context.Canceled)
}

// "withdraw 150, deposit 10, withdraw 5" on a balance of 100: the first
// fails and halts the account; the other two, and a Credit submitted
// meanwhile, are held unrun; Resume runs them, the Credit first.
func TestFailedWithdrawalHaltsAccountUntilResume(t *testing.T) {
	b, halts := newHaltingBank(t)
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1))

	_, err := await(t)(b.Withdraw(ctx, 1, 150))
	require.ErrorIs(t, err, ErrInsufficientFunds)
	dep, err := b.Deposit(ctx, 1, 10)
	require.NoError(t, err)
	wd, err := b.Withdraw(ctx, 1, 5)
	require.NoError(t, err)
	halt := <-halts
	assert.ErrorIs(t, halt, seqsched.ErrHalted)
	assert.ErrorIs(t, halt, ErrInsufficientFunds)
	assert.EqualError(t, halt, "seqsched: session 1 halted: withdraw 150 on account 1: ledger: insufficient funds (balance 100)")
	assert.True(t, b.Halted(1))
	cr, err := b.Credit(ctx, 1, 1)
	require.NoError(t, err)

	r, err := b.Review(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, Receipt{Op: OpReview, Account: 1, Balance: 100}, r, "nothing ran while halted")
	assert.True(t, pending(dep) && pending(wd) && pending(cr), "held operations resolved while halted")

	require.NoError(t, b.Resume(1))
	assert.False(t, b.Halted(1))
	assert.Equal(t, Receipt{Op: OpCredit, Account: 1, Amount: 1, Balance: 101, Version: 1}, must(t)(cr, nil))
	assert.Equal(t, Receipt{Op: OpDeposit, Account: 1, Amount: 10, Balance: 111, Version: 2}, must(t)(dep, nil))
	assert.Equal(t, Receipt{Op: OpWithdraw, Account: 1, Amount: 5, Balance: 106, Version: 3}, must(t)(wd, nil))
	assert.Empty(t, halts, "one halt")
}

// Discard drops what a halted account holds, unrun, and leaves its
// balance; the account then runs new operations as usual.
func TestDiscardDropsHeldOperations(t *testing.T) {
	b, halts := newHaltingBank(t)
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1))
	w1, err := b.Withdraw(ctx, 1, 150)
	require.NoError(t, err)
	dep, err := b.Deposit(ctx, 1, 10)
	require.NoError(t, err)
	<-halts
	_, err = w1.Await(ctx)
	require.ErrorIs(t, err, ErrInsufficientFunds)

	require.NoError(t, b.Discard(ctx, 1))
	_, err = dep.Await(ctx)
	assert.ErrorIs(t, err, seqsched.ErrDiscarded)
	assert.False(t, b.Halted(1))
	assert.Equal(t, int64(100), must(t)(b.Balance(ctx, 1)).Balance, "the dropped deposit never ran")
	assert.Equal(t, int64(90), must(t)(b.Withdraw(ctx, 1, 10)).Balance)
}

// A transfer whose account is halted waits with it; discarding that
// account fails the transfer instead of leaving the other account's half
// waiting for ever.
func TestDiscardOfHaltedAccountFailsItsTransfer(t *testing.T) {
	for _, halted := range []AccountID{1, 2} { // the lower and the higher ID's half
		t.Run(fmt.Sprintf("account %d halted", halted), func(t *testing.T) {
			b, halts := newHaltingBank(t)
			ctx := context.Background()
			require.NoError(t, b.CreateAccounts(ctx, 100, 1, 2))
			_, err := b.Withdraw(ctx, halted, 500)
			require.NoError(t, err)
			<-halts
			tr, err := b.Transfer(ctx, 1, 2, 10)
			require.NoError(t, err)
			require.NoError(t, b.Discard(ctx, halted))
			_, err = tr.Await(ctx)
			assert.ErrorIs(t, err, seqsched.ErrDiscarded)
			for _, id := range []AccountID{1, 2} {
				assert.Equal(t, int64(100), must(t)(b.Balance(ctx, id)).Balance, "account %d", id)
			}
		})
	}
}
