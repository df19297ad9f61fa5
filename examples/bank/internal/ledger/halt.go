package ledger

import (
	"context"

	"github.com/seqsched/seqsched"
)

// An operator's tools for a halted account (see Config.HaltWithdrawals).
// A halt is a state of the account's seqsched session, not of the
// database: the session starts nothing while halted, holds no goroutine,
// and keeps accepting operations, which wait, in order, for Resume. Until
// then the database row shows exactly what ran before the failed
// withdrawal, which is what Review reads.

// Halted reports whether id is halted and not yet resumed. It is always
// false for an Unordered bank.
func (b *Bank) Halted(id AccountID) bool {
	return b.sched != nil && b.sched.Paused(id)
}

// Resume ends id's halt: the operations held for it run, in their order
// (High ones, such as a Credit, first). Resuming an account that is not
// halted does nothing. It never waits.
func (b *Bank) Resume(id AccountID) error {
	if b.sched == nil {
		return nil
	}
	return b.sched.Resume(id)
}

// Discard drops every operation held for id: each fails with
// seqsched.ErrDiscarded without running, and the balance stays as it was.
// The halt ends with them: id's next operations run as usual. It returns
// once the drop is done, or ctx's error if ctx ends first. It never
// touches the database.
func (b *Bank) Discard(ctx context.Context, id AccountID) error {
	if b.sched == nil {
		return nil
	}
	return b.sched.Discard(ctx, id)
}

// Credit adds amount (> 0) to id: an operator's correction. It is High
// priority: it runs before every operation already queued for id (but
// after the one running), so on a halted account it is the first thing to
// run once the account is resumed. With a RequestID among opts, a retry of
// it is carried out once.
func (b *Bank) Credit(ctx context.Context, id AccountID, amount int64, opts ...OpOption) (Pending, error) {
	return b.change(ctx, OpCredit, id, amount, amount, opts, seqsched.High)
}

// Review reads id's state straight from the database, outside the
// account's order: what an operator looks at while the account is halted,
// when a Balance would wait behind the held operations. It is the state
// after the operations that have committed so far.
func (b *Bank) Review(ctx context.Context, id AccountID) (Receipt, error) {
	r, err := b.st.read(ctx, OpReview, id)
	if err != nil {
		return r, &OpError{Op: OpReview, Account: id, Err: err}
	}
	return r, nil
}
