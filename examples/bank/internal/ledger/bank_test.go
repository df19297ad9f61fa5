package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched"
)

func TestScriptSubmittedBackToBackEndsAtZero(t *testing.T) {
	b, _ := newBank(t, Config{})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1))

	w1, err1 := b.Withdraw(ctx, 1, 50)
	d, err2 := b.Deposit(ctx, 1, 100)
	w2, err3 := b.Withdraw(ctx, 1, 150)
	var got []int64
	for _, r := range []Receipt{must(t)(w1, err1), must(t)(d, err2), must(t)(w2, err3)} {
		got = append(got, r.Balance)
	}
	assert.Equal(t, []int64{50, 150, 0}, got, "balances after each step")
}

func TestBadInputReturnsErrorAndLeavesDatabaseUnchanged(t *testing.T) {
	b, db := newBank(t, Config{})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1, 2))
	require.NoError(t, b.CreateAccounts(ctx, math.MaxInt64-5, 3))
	must(t)(b.Deposit(ctx, 1, 5))
	before := dump(t, db)

	refused := []struct {
		name string
		do   func() (Pending, error)
		want error
	}{
		{"negative deposit", func() (Pending, error) { return b.Deposit(ctx, 1, -5) }, ErrInvalidAmount},
		{"zero withdrawal", func() (Pending, error) { return b.Withdraw(ctx, 1, 0) }, ErrInvalidAmount},
		{"negative transfer", func() (Pending, error) { return b.Transfer(ctx, 1, 2, -1) }, ErrInvalidAmount},
		{"transfer to self", func() (Pending, error) { return b.Transfer(ctx, 1, 1, 10) }, ErrSameAccount},
		{"empty request ID", func() (Pending, error) { return b.Deposit(ctx, 1, 5, RequestID("")) }, ErrBadRequestID},
		{"long request ID", func() (Pending, error) {
			return b.Transfer(ctx, 1, 2, 5, RequestID(strings.Repeat("r", MaxRequestID+1)))
		}, ErrBadRequestID},
	}
	for _, tc := range refused {
		p, err := tc.do()
		assert.Nil(t, p, tc.name)
		assert.ErrorIs(t, err, tc.want, tc.name)
		var opErr *OpError
		assert.ErrorAs(t, err, &opErr, tc.name)
	}

	failed := []struct {
		name string
		do   func() (Pending, error)
		want error
		msg  string
	}{
		{"unknown account", func() (Pending, error) { return b.Deposit(ctx, 99, 10) }, ErrUnknownAccount,
			"deposit 10 on account 99: ledger: unknown account"},
		{"overdraft", func() (Pending, error) { return b.Withdraw(ctx, 1, 106) }, ErrInsufficientFunds,
			"withdraw 106 on account 1: ledger: insufficient funds (balance 105)"},
		{"transfer overdraft", func() (Pending, error) { return b.Transfer(ctx, 2, 1, 101) }, ErrInsufficientFunds,
			"transfer 101 from account 2 to 1: ledger: insufficient funds (balance 100)"},
		// The payer is debited first inside the transaction: the rollback
		// must undo it.
		{"transfer to unknown payee", func() (Pending, error) { return b.Transfer(ctx, 1, 99, 10) }, ErrUnknownAccount,
			"transfer 10 from account 1 to 99: payee: ledger: unknown account"},
		{"transfer from unknown payer", func() (Pending, error) { return b.Transfer(ctx, 99, 1, 10) }, ErrUnknownAccount,
			"transfer 10 from account 99 to 1: ledger: unknown account"},
		// The sum is never computed: SQLite would make it a float and
		// the Scan fail, Postgres refuse it with its own error.
		{"deposit past MaxInt64", func() (Pending, error) { return b.Deposit(ctx, 1, math.MaxInt64) }, ErrOverflow,
			"deposit 9223372036854775807 on account 1: ledger: balance would overflow (balance 105)"},
		{"credit past MaxInt64", func() (Pending, error) { return b.Credit(ctx, 3, 6) }, ErrOverflow,
			"credit 6 on account 3: ledger: balance would overflow (balance 9223372036854775802)"},
		{"transfer past the payee's MaxInt64", func() (Pending, error) { return b.Transfer(ctx, 1, 3, 6) }, ErrOverflow,
			"transfer 6 from account 1 to 3: payee: ledger: balance would overflow (balance 9223372036854775802)"},
		{"balance of unknown account", func() (Pending, error) { return b.Balance(ctx, 99) }, ErrUnknownAccount,
			"balance on account 99: ledger: unknown account"},
		{"freeze unknown account", func() (Pending, error) { return b.Freeze(ctx, 99) }, ErrUnknownAccount,
			"freeze on account 99: ledger: unknown account"},
	}
	for _, tc := range failed {
		_, err := await(t)(tc.do())
		assert.ErrorIs(t, err, tc.want, tc.name)
		assert.EqualError(t, err, tc.msg, tc.name)
	}
	assert.Equal(t, before, dump(t, db), "database changed by failed operations")
}

func TestFrozenAccountRefusesChanges(t *testing.T) {
	b, db := newBank(t, Config{})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1, 2))
	must(t)(b.Freeze(ctx, 1))
	before := dump(t, db)
	for _, op := range []func() (Pending, error){
		func() (Pending, error) { return b.Deposit(ctx, 1, 1) },
		func() (Pending, error) { return b.Withdraw(ctx, 1, 1) },
		func() (Pending, error) { return b.Transfer(ctx, 1, 2, 1) },
		func() (Pending, error) { return b.Transfer(ctx, 2, 1, 1) },
	} {
		_, err := await(t)(op())
		assert.ErrorIs(t, err, ErrFrozen)
	}
	assert.Equal(t, before, dump(t, db))
	r := must(t)(b.Balance(ctx, 1))
	assert.Equal(t, Receipt{Op: OpBalance, Account: 1, Balance: 100, Frozen: true, Version: 1}, r)
}

func TestFreezeOvertakesQueuedOperations(t *testing.T) {
	b, _ := newBank(t, Config{})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1))

	release := gate(t, b, 1)
	dep, err1 := b.Deposit(ctx, 1, 10)
	wd, err2 := b.Withdraw(ctx, 1, 5)
	fr, err3 := b.Freeze(ctx, 1) // submitted last, runs first
	release()

	assert.Equal(t, Receipt{Op: OpFreeze, Account: 1, Balance: 100, Frozen: true, Version: 1}, must(t)(fr, err3))
	_, err := await(t)(dep, err1)
	assert.ErrorIs(t, err, ErrFrozen, "deposit queued before the freeze")
	_, err = await(t)(wd, err2)
	assert.ErrorIs(t, err, ErrFrozen, "withdrawal queued before the freeze")
}

func TestAuditOvertakesQueuedOperations(t *testing.T) {
	b, _ := newBank(t, Config{})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1))

	release := gate(t, b, 1)
	var deps []Pending
	for amount := int64(1); amount <= 3; amount++ {
		p, err := b.Deposit(ctx, 1, amount)
		require.NoError(t, err)
		deps = append(deps, p)
	}
	audit, err := b.Audit(ctx, 1)
	release()

	assert.Equal(t, Receipt{Op: OpAudit, Account: 1, Balance: 100}, must(t)(audit, err),
		"the audit must see the account before the queued deposits")
	var got []int64
	for _, p := range deps {
		got = append(got, must(t)(p, nil).Balance)
	}
	assert.Equal(t, []int64{101, 103, 106}, got)
}

// The naive way to "lock" two accounts: run on the payer's session and call
// the ordinary operations from there. Withdraw queues a task behind the one
// that is running, so awaiting it could never end; the scheduler's guard
// returns ErrWouldDeadlock at once instead of hanging.
func TestNaiveTransferIsCaughtByDeadlockGuard(t *testing.T) {
	b, db := newBank(t, Config{})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1, 2))

	naive, err := b.sched.Go(ctx, 1, func(ctx context.Context) error {
		p, err := b.Withdraw(ctx, 1, 10) // queued behind this very task
		if err != nil {
			return err
		}
		if _, err := p.Await(ctx); err != nil {
			return err
		}
		return errors.New("unreachable: the await should have been refused")
	})
	require.NoError(t, err)
	_, err = naive.Await(ctx)
	require.ErrorIs(t, err, seqsched.ErrWouldDeadlock)

	// The withdrawal itself was accepted and runs after the naive task.
	assert.Equal(t, int64(90), must(t)(b.Balance(ctx, 1)).Balance)
	assert.Len(t, dump(t, db), 3, "two accounts and one ledger row")
}

// A transfer takes effect in submission order on both accounts: a
// withdrawal submitted right after an incoming transfer sees the money.
func TestTransferIsOrderedOnBothAccounts(t *testing.T) {
	b, _ := newBank(t, Config{})
	ctx := context.Background()
	const pairs = 20
	for i := range pairs {
		lo, hi := AccountID(2*i+1), AccountID(2*i+2)
		require.NoError(t, b.CreateAccounts(ctx, 0, lo))
		require.NoError(t, b.CreateAccounts(ctx, 100, hi))
	}
	var ps []Pending
	for i := range pairs {
		lo, hi := AccountID(2*i+1), AccountID(2*i+2)
		// Alternate which side pays, so both task orders are exercised.
		payer, payee := hi, lo
		if i%2 == 1 {
			require.NoError(t, func() error { _, err := await(t)(b.Transfer(ctx, hi, lo, 100)); return err }())
			payer, payee = lo, hi
		}
		tr, err := b.Transfer(ctx, payer, payee, 60)
		require.NoError(t, err)
		wd, err := b.Withdraw(ctx, payee, 60)
		require.NoError(t, err)
		ps = append(ps, tr, wd)
	}
	for i, p := range ps {
		_, err := p.Await(ctx)
		assert.NoError(t, err, "operation %d", i)
	}
}

// Transfers in every direction between a few accounts, from many
// goroutines at once, all finish, and money is conserved.
func TestConcurrentTransfersInAllDirectionsFinish(t *testing.T) {
	b, _ := newBank(t, Config{})
	ctx := context.Background()
	const accounts, rounds = 4, 15
	ids := []AccountID{1, 2, 3, 4}
	require.NoError(t, b.CreateAccounts(ctx, 1000, ids...))

	var wg sync.WaitGroup
	errs := make(chan error, accounts*accounts*rounds)
	for _, from := range ids {
		for _, to := range ids {
			if from == to {
				continue
			}
			wg.Go(func() {
				for range rounds {
					_, err := await(t)(b.Transfer(ctx, from, to, 1))
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		assert.NoError(t, err)
		n++
	}
	assert.Equal(t, accounts*(accounts-1)*rounds, n)
	var total int64
	for _, id := range ids {
		total += must(t)(b.Balance(ctx, id)).Balance
	}
	assert.Equal(t, int64(accounts*1000), total)
}

// The journal follows operations from elsewhere: while it is stuck, the
// account's operations still complete; once it moves, every committed
// change gets its line, in order.
func TestSlowJournalDoesNotDelayAccount(t *testing.T) {
	w := &blockingWriter{open: make(chan struct{})}
	b, _ := newBank(t, Config{Journal: w})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 0, 1))

	var want []string
	for i := int64(1); i <= 20; i++ {
		r := must(t)(b.Deposit(ctx, 1, i)) // completes although the journal is stuck
		want = append(want, r.String()+"\n")
	}
	_, err := await(t)(b.Withdraw(ctx, 1, 1000)) // fails: no line
	require.ErrorIs(t, err, ErrInsufficientFunds)
	must(t)(b.Balance(ctx, 1)) // reads: no line
	assert.Empty(t, w.get(), "nothing can have been written yet")

	close(w.open)
	require.NoError(t, b.Close(ctx))
	got := w.get()
	assert.Equal(t, want, got)
	assert.Equal(t, "account=1 op=deposit amount=20 balance=210 version=20\n", got[len(got)-1])
}

func TestClosedBankRefusesOperations(t *testing.T) {
	b, _ := newBank(t, Config{})
	ctx := context.Background()
	require.NoError(t, b.CreateAccounts(ctx, 100, 1, 2))
	require.NoError(t, b.Close(ctx))
	_, err := b.Deposit(ctx, 1, 1)
	assert.ErrorIs(t, err, ErrClosed)
	_, err = b.Transfer(ctx, 1, 2, 1)
	assert.ErrorIs(t, err, ErrClosed)
}

// Closing the database under load (as a crash would cut it off) and
// opening it again loses no committed operation: every deposit whose
// Pending succeeded is in the balance and the ledger, and no other.
func TestClosingDatabaseUnderLoadLosesNoCommittedOperation(t *testing.T) {
	for _, mode := range []Config{{}, {Unordered: true}} {
		t.Run(fmt.Sprintf("unordered=%v", mode.Unordered), func(t *testing.T) {
			dsn := testDSN(t)
			db, err := OpenDB(context.Background(), dsn)
			require.NoError(t, err)
			b, err := New(db, mode)
			require.NoError(t, err)
			ctx := context.Background()
			const accounts, window, closeAfter = 8, 4, 100
			ids := []AccountID{1, 2, 3, 4, 5, 6, 7, 8}
			require.NoError(t, b.CreateAccounts(ctx, 0, ids...))

			var mu sync.Mutex
			committed := map[AccountID]int64{}
			successes := 0
			pull := make(chan struct{})
			var wg sync.WaitGroup
			for _, id := range ids {
				wg.Go(func() {
					for {
						var ps []Pending
						for range window { // several in flight per account
							p, err := b.Deposit(ctx, id, 1)
							require.NoError(t, err)
							ps = append(ps, p)
						}
						failed := false
						for _, p := range ps {
							if _, err := p.Await(ctx); err != nil {
								require.ErrorContains(t, err, "database is closed")
								failed = true
								continue
							}
							mu.Lock()
							committed[id]++
							successes++
							if successes == closeAfter {
								close(pull)
							}
							mu.Unlock()
						}
						if failed {
							return
						}
					}
				})
			}
			<-pull
			require.NoError(t, db.Close()) // in-flight transactions finish; new ones fail
			wg.Wait()
			require.NoError(t, b.Close(ctx))

			db, err = OpenDB(ctx, dsn)
			require.NoError(t, err)
			defer db.Close()
			total := int64(0)
			for _, id := range ids {
				var balance, rows int64
				require.NoError(t, db.QueryRow(`SELECT balance FROM accounts WHERE id = $1`, int64(id)).Scan(&balance))
				require.NoError(t, db.QueryRow(`SELECT count(*) FROM ledger WHERE account = $1`, int64(id)).Scan(&rows))
				assert.Equal(t, committed[id], balance, "account %d: balance = committed deposits", id)
				assert.Equal(t, committed[id], rows, "account %d: ledger rows = committed deposits", id)
				total += balance
			}
			assert.GreaterOrEqual(t, total, int64(closeAfter))
		})
	}
}

func TestOpErrorMessages(t *testing.T) {
	e := &OpError{Op: OpWithdraw, Account: 7, Amount: 5, Err: ErrFrozen}
	assert.Equal(t, "withdraw 5 on account 7: ledger: account frozen", e.Error())
	assert.True(t, strings.HasPrefix((&OpError{Op: OpAudit, Account: 7, Err: ErrClosed}).Error(), "audit on account 7"))
}
