package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/examples/bank/internal/ledger"
	"github.com/seqsched/seqsched/examples/bank/internal/replay"
)

// The halt phase: after the replay, a few more accounts receive the same
// script from a balance too low for its first step. That withdrawal
// fails and, with seqsched.HaltOnError, halts its account: the deposit and
// the second withdrawal are held, unrun, where without the halt the second
// withdrawal would run after the first had failed. An operator looks at
// each halted account and resumes it (after crediting the 10 it lacked) or
// discards what it holds; either way every balance ends exact.

// haltOpening is the halt accounts' opening balance: 10 short of the
// script's first withdrawal of 50.
const haltOpening = 40

// shortfall is what the operator credits before resuming: with it, the
// held deposit 100 and withdrawal 150 take the account from 50 to exactly 0.
const shortfall = 10

// The operator's commands (-operator).
const (
	opResume  = "resume"
	opDiscard = "discard"
)

// hooks let tests watch the run.
type hooks struct {
	// halted, if set, is called once every halt account has halted and
	// been checked, before the operator acts on them.
	halted func(b *ledger.Bank, ids []ledger.AccountID)
}

// haltResult is what the halt phase did and found.
type haltResult struct {
	accounts int
	held     int // operations held while halted
	operator string
	want     int64 // every halt account's final balance
	failures []replay.Failure
}

// halts collects the bank's halt reports. note is Config.OnHalt: it runs on
// the account's session and never blocks. A halt of an account outside
// the halt phase is unexpected (in order, the replay's withdrawals never
// fail): it is resumed at once, so that the replay reports the failed step
// as it always has.
type halts struct {
	bank  *ledger.Bank
	first ledger.AccountID // halt accounts are first, first+1, ...
	ch    chan ledger.AccountID
}

func (h *halts) note(id ledger.AccountID, _ error) {
	if id < h.first {
		_ = h.bank.Resume(id) // never waits; a valid key
		return
	}
	select {
	case h.ch <- id:
	default: // more halts than accounts: counted by the phase as left over
	}
}

// haltPhase runs the halt phase on ids and has the operator command op act
// on every halt.
func haltPhase(ctx context.Context, b *ledger.Bank, h *halts, ids []ledger.AccountID, op string, hk hooks) (haltResult, error) {
	res := haltResult{accounts: len(ids), held: 2 * len(ids), operator: op}
	fail := func(id ledger.AccountID, format string, args ...any) {
		res.failures = append(res.failures, replay.Failure{Account: id, What: fmt.Sprintf(format, args...)})
	}
	if err := b.CreateAccounts(ctx, haltOpening, ids...); err != nil {
		return res, fmt.Errorf("halts: set up accounts (the database must be empty): %w", err)
	}
	steps := make(map[ledger.AccountID][3]ledger.Pending, len(ids))
	for _, id := range ids {
		var ps [3]ledger.Pending
		var err error
		if ps[0], err = b.Withdraw(ctx, id, 50); err != nil {
			return res, err
		}
		if ps[1], err = b.Deposit(ctx, id, 100); err != nil {
			return res, err
		}
		if ps[2], err = b.Withdraw(ctx, id, 150); err != nil {
			return res, err
		}
		steps[id] = ps
	}

	// Every account halts at its first step; until the operator acts,
	// nothing more of it runs.
	for range ids {
		select {
		case <-h.ch:
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	for _, id := range ids {
		if !b.Halted(id) {
			fail(id, "not halted after its failed withdrawal")
		}
		r, err := b.Review(ctx, id)
		if err != nil {
			return res, err
		}
		if r.Balance != haltOpening || r.Version != 0 {
			fail(id, "while halted: balance %d after %d changes, want %d after none", r.Balance, r.Version, haltOpening)
		}
		ps := steps[id]
		for i, p := range ps[1:] {
			if resolved(p) {
				fail(id, "step %d ran while halted", i+2)
			}
		}
	}
	if hk.halted != nil {
		hk.halted(b, ids)
	}

	// The operator.
	credits := make(map[ledger.AccountID]ledger.Pending, len(ids))
	for _, id := range ids {
		switch op {
		case opResume:
			p, err := b.Credit(ctx, id, shortfall) // High: the first to run on resume
			if err != nil {
				return res, err
			}
			credits[id] = p
			if err := b.Resume(id); err != nil {
				return res, err
			}
			res.want = 0
		case opDiscard:
			if err := b.Discard(ctx, id); err != nil {
				return res, err
			}
			res.want = haltOpening
		}
	}

	// What ran, in which order, and where each balance ended.
	for _, id := range ids {
		ps := steps[id]
		if _, err := ps[0].Await(ctx); !errors.Is(err, ledger.ErrInsufficientFunds) {
			fail(id, "step 1: %v, want insufficient funds", err)
		}
		var ran []ledger.Pending
		switch op {
		case opResume:
			ran = []ledger.Pending{credits[id], ps[1], ps[2]}
		case opDiscard:
			for i, p := range ps[1:] {
				if _, err := p.Await(ctx); !errors.Is(err, seqsched.ErrDiscarded) {
					fail(id, "step %d: %v, want it discarded", i+2, err)
				}
			}
		}
		for i, p := range ran {
			r, err := p.Await(ctx)
			if err != nil {
				fail(id, "after resume: %v", err)
			} else if r.Version != int64(i+1) {
				fail(id, "after resume: %s ran as change %d, want %d", r.Op, r.Version, i+1)
			}
		}
		p, err := b.Balance(ctx, id)
		if err != nil {
			return res, err
		}
		r, err := p.Await(ctx)
		if err != nil {
			return res, err
		}
		if r.Balance != res.want {
			fail(id, "final balance %d, want %d", r.Balance, res.want)
		}
	}
	if n := len(h.ch); n > 0 {
		fail(ids[0], "%d more halts than accounts", n)
	}
	slices.SortStableFunc(res.failures, func(a, b replay.Failure) int { return cmp.Compare(a.Account, b.Account) })
	return res, nil
}

// resolved reports whether p has resolved, without waiting: a resolved
// Pending answers whatever its ctx says.
func resolved(p ledger.Pending) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Await(ctx)
	return !errors.Is(err, context.Canceled)
}

// reportHalts prints what the halt phase did and found.
func reportHalts(out io.Writer, res haltResult) {
	fmt.Fprintf(out, "halts:      %d accounts x [withdraw 50, deposit 100, withdraw 150] from balance %d, HaltOnError\n",
		res.accounts, haltOpening)
	fmt.Fprintf(out, "            withdraw 50 failed on each and halted it: %d later operations held\n", res.held)
	switch res.operator {
	case opResume:
		fmt.Fprintf(out, "operator:   resume each, after a credit of %d: credit, deposit 100, withdraw 150 ran in that order\n", shortfall)
	case opDiscard:
		fmt.Fprintf(out, "operator:   discard each: its held operations dropped unrun\n")
	}
	for i, f := range res.failures {
		if i == maxShown {
			fmt.Fprintf(out, "  ... and %d more\n", len(res.failures)-maxShown)
			break
		}
		fmt.Fprintf(out, "  %v\n", f)
	}
	if len(res.failures) == 0 {
		fmt.Fprintf(out, "nothing ran while halted, and every halted account ends at exactly %d: OK\n", res.want)
	}
}
