package ledger

import (
	"context"

	"github.com/seqsched/seqsched"
)

// Transfer moves amount (> 0) from one account to another, in one
// transaction, in order with the other operations of both accounts: it takes
// effect after everything submitted earlier on either account and before
// everything submitted later.
//
// How it holds both accounts without deadlock: a transfer is two tasks, one
// on each account's session, submitted back to back while holding b.xfer.
// The task on the higher ID's session waits until the one on the lower ID's
// session has started, then commits the transaction; the lower one awaits
// its future. While both run, neither account runs anything else. Because
// pairs are submitted under one lock, every session sees the transfers it
// takes part in in the same global order, so the oldest unfinished transfer
// always finds both its tasks at the head of their queues and can finish: no
// cycle of waits can form. (Without the lock, two transfers between the same
// accounts could be queued in opposite orders and wait on each other for
// ever; the scheduler cannot see that.)
//
// The naive version, a task on the payer's session that calls Withdraw on
// the payer and awaits it, would wait for a task queued behind itself. The
// scheduler's guard catches that: Await returns seqsched.ErrWouldDeadlock at
// once instead of hanging (see the tests).
//
// With a RequestID among opts, a retry of the transfer is carried out once
// (see RequestID).
func (b *Bank) Transfer(ctx context.Context, from, to AccountID, amount int64, opts ...OpOption) (Pending, error) {
	refuse := func(err error) (Pending, error) {
		return nil, &OpError{Op: OpTransfer, Account: from, To: to, Amount: amount, Err: err}
	}
	switch {
	case amount <= 0:
		return refuse(ErrInvalidAmount)
	case from == to:
		return refuse(ErrSameAccount)
	}
	req, err := requestOf(opts)
	if err != nil {
		return refuse(err)
	}
	commit := b.measured(OpTransfer, from, amount, func(ctx context.Context) (Receipt, error) {
		r, err := b.st.transfer(ctx, from, to, amount, req)
		if err != nil {
			err = &OpError{Op: OpTransfer, Account: from, To: to, Amount: amount, Err: err}
		}
		return r, err
	})

	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return refuse(ErrClosed)
	}
	var p Pending
	if b.sched == nil {
		p = b.loosely(ctx, commit)
	} else {
		var err error
		if p, err = b.pair(ctx, from, to, commit); err != nil {
			return refuse(err)
		}
	}
	if err := b.journal.follow(ctx, from, p); err != nil {
		return nil, err
	}
	return p, nil
}

// pair submits the two tasks of a transfer; see Transfer.
func (b *Bank) pair(ctx context.Context, from, to AccountID, commit func(context.Context) (Receipt, error)) (Pending, error) {
	lo, hi := from, to
	if hi < lo {
		lo, hi = hi, lo
	}
	loStarted := make(chan struct{}) // closed by lo's task when it runs
	// lo's future, once submitted, or why it was not accepted (a full
	// queue, Close): hi's task watches it, so that it gives up when lo's
	// task is refused or dropped unrun (Discard of a halted lo, or its
	// submit ctx ended) instead of waiting for a start that never comes.
	type submitted struct {
		f   *seqsched.Future[Receipt]
		err error
	}
	loFuture := make(chan submitted, 1)

	b.xfer.Lock()
	defer b.xfer.Unlock()
	hiF, err := seqsched.Submit(ctx, b.sched, hi, func(ctx context.Context) (Receipt, error) {
		var lo submitted
		select {
		case lo = <-loFuture:
		case <-ctx.Done(): // Shutdown gave up
			return Receipt{}, ctx.Err()
		}
		if lo.err != nil {
			return Receipt{}, lo.err
		}
		loF := lo.f
		select {
		case <-loStarted:
			return commit(ctx)
		case <-loF.Done(): // resolved without starting: dropped
			_, err := loF.Await(ctx)
			return Receipt{}, err
		case <-ctx.Done(): // Shutdown gave up
			return Receipt{}, ctx.Err()
		}
	})
	if err != nil {
		return nil, err
	}
	loF, err := seqsched.Submit(ctx, b.sched, lo, func(ctx context.Context) (Receipt, error) {
		close(loStarted)
		return hiF.Await(ctx) // another session: allowed
	})
	loFuture <- submitted{loF, err}
	if err != nil {
		return nil, err
	}
	return loF, nil
}

// loosely runs fn on a goroutine of its own: Unordered mode.
func (b *Bank) loosely(ctx context.Context, fn func(context.Context) (Receipt, error)) Pending {
	p := &loose{done: make(chan struct{})}
	b.loose.Add(1)
	go func() {
		defer b.loose.Done()
		defer close(p.done)
		p.r, p.err = fn(ctx)
	}()
	return p
}

// loose is the Pending of an Unordered operation.
type loose struct {
	done chan struct{}
	r    Receipt
	err  error
}

func (p *loose) Await(ctx context.Context) (Receipt, error) {
	select {
	case <-p.done:
		return p.r, p.err
	case <-ctx.Done():
		return Receipt{}, ctx.Err()
	}
}

var _ Pending = (*seqsched.Future[Receipt])(nil)
