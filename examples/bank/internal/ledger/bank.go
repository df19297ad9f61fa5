// Package ledger is a small transaction service on database/sql in which
// every operation on an account runs as a seqsched task keyed by the account
// ID. Operations on one account therefore never overlap and take effect in
// the order they were submitted, while different accounts proceed in
// parallel; administrative operations (freeze, audit) use the High lane and
// overtake what is queued.
package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/seqsched/seqsched"
)

// AccountID identifies an account; it is also the seqsched session key.
type AccountID int64

// Op names an operation.
type Op string

// The operations a Bank offers.
const (
	OpDeposit  Op = "deposit"
	OpWithdraw Op = "withdraw"
	OpBalance  Op = "balance"
	OpTransfer Op = "transfer"
	OpFreeze   Op = "freeze"
	OpAudit    Op = "audit"
	OpCredit   Op = "credit" // an operator's correction; see Credit
	OpReview   Op = "review" // an operator's look, outside the account's order; see Review
)

// Receipt is the outcome of a successful operation: the account's state
// right after it.
type Receipt struct {
	Op      Op
	Account AccountID
	To      AccountID // transfers only
	Amount  int64
	Balance int64 // the account's balance after the operation (for a transfer: the payer's)
	Frozen  bool
	Version int64 // changes committed on the account so far
	// Replayed is set when the operation carried a RequestID that had
	// been carried out already: this is the first answer, and nothing
	// changed this time.
	Replayed bool
}

// RequestID names one request of a client, so that a retry of it is
// carried out once. A client that timed out, or lost the answer, cannot
// tell whether its deposit went through; sent again with the same
// RequestID, the deposit is not applied a second time: the retry gets the
// first receipt, marked Replayed. Give each request a unique ID (a random
// UUID, made once per request by the client, not per attempt), of 1 to
// MaxRequestID bytes. The ID is recorded in the operation's own
// transaction, so a change and its ID commit together or not at all; using
// one ID for a different operation fails with ErrRequestReused. IDs are
// kept for good here; a service deletes them once no retry can come (say,
// after a day).
type RequestID string

// MaxRequestID is the longest RequestID, in bytes.
const MaxRequestID = 128

// An OpOption modifies one Deposit, Withdraw, Credit or Transfer; a
// RequestID is one.
type OpOption interface{ opOption() }

func (RequestID) opOption() {}

// requestOf returns the RequestID among opts, or "" for none, and
// ErrBadRequestID for an empty or too long one.
func requestOf(opts []OpOption) (RequestID, error) {
	var req RequestID
	for _, o := range opts {
		if r, ok := o.(RequestID); ok {
			if r == "" || len(r) > MaxRequestID {
				return "", fmt.Errorf("%w: %d bytes, want 1..%d", ErrBadRequestID, len(r), MaxRequestID)
			}
			req = r
		}
	}
	return req, nil
}

// Pending is an operation that was accepted and will complete. Await waits
// for it; ctx bounds only the wait. *seqsched.Future[Receipt] is one.
type Pending interface {
	Await(ctx context.Context) (Receipt, error)
}

// Config configures a Bank.
type Config struct {
	// Journal receives one line per committed change. Nil discards them.
	Journal io.Writer
	// Unordered runs every operation on its own goroutine instead of its
	// account's seqsched session: the "before" picture, for comparison.
	Unordered bool
	// HaltWithdrawals halts an account whose withdrawal fails (it is
	// submitted with seqsched.HaltOnError): the account's later operations,
	// those already queued and those submitted meanwhile, are accepted and
	// held, unrun, until an operator resumes the account (Resume) or drops
	// them (Discard). Close waits for held operations until its ctx ends,
	// so resolve every halt first. Ignored when Unordered.
	HaltWithdrawals bool
	// OnHalt, if set, is told of each halt, before the account could run
	// anything else: the account, and an error that wraps both
	// seqsched.ErrHalted and the withdrawal's *OpError. It runs on the
	// account's session, so it must not block: hand the halt to an
	// operator. Without it a halt is logged (slog.Default, at Error).
	OnHalt func(id AccountID, err error)
	// MaxQueue bounds the operations that may wait for one account in
	// each lane (the running one is not counted); 0 means
	// DefaultMaxQueue. Beyond it an operation is refused at once with an
	// *OpError wrapping seqsched.ErrQueueFull, and the caller answers
	// "busy, try again" instead of the bank's memory growing with one
	// account's backlog (a halted account's included). Ignored when
	// Unordered.
	MaxQueue int
}

// DefaultMaxQueue is Config.MaxQueue's default.
const DefaultMaxQueue = 1000

// Bank runs account operations against a database. Its methods are safe for
// concurrent use. Every method that takes an account returns at once with a
// Pending (or an error if the operation was refused: bad input, or the bank
// is closed); the operation runs on the account's session in submission
// order. Each operation is one database transaction, committed before its
// Pending resolves.
type Bank struct {
	st      store
	sched   *seqsched.Scheduler[AccountID] // nil when Unordered
	halt    bool                           // Config.HaltWithdrawals, ordered
	journal *journal
	stats   recorder

	// mu makes Close wait for operations being submitted, so that an
	// accepted operation always gets its journal line.
	mu     sync.RWMutex
	closed bool
	// xfer orders the submission of transfer pairs; see Transfer.
	xfer sync.Mutex
	// loose tracks the goroutines of Unordered mode.
	loose sync.WaitGroup
}

// New returns a Bank on db, which OpenDB has prepared. The caller keeps
// ownership of db and closes it after Close.
//
// The scheduler has no WithMaxConcurrency limit on purpose: a transfer holds
// the turns of two accounts at once, and under a small limit the second
// account might never get a slot (see seqsched.WithMaxConcurrency). The
// database pool is the real limit.
func New(db *sql.DB, cfg Config) (*Bank, error) {
	b := &Bank{st: store{db: db}, halt: cfg.HaltWithdrawals && !cfg.Unordered}
	if !cfg.Unordered {
		if cfg.MaxQueue < 0 {
			return nil, fmt.Errorf("ledger: Config.MaxQueue %d: must be 0 (the default) or more", cfg.MaxQueue)
		}
		maxQueue := cfg.MaxQueue
		if maxQueue == 0 {
			maxQueue = DefaultMaxQueue
		}
		opts := []seqsched.Option{seqsched.WithMaxQueue(maxQueue)}
		if onHalt := cfg.OnHalt; onHalt != nil {
			// Futures report no failure here: only a halt comes.
			opts = append(opts, seqsched.WithErrorHandler(func(_ context.Context, id AccountID, err error) {
				onHalt(id, err)
			}))
		}
		s, err := seqsched.New[AccountID](opts...)
		if err != nil {
			return nil, err
		}
		b.sched = s
	}
	j, err := newJournal(cfg.Journal)
	if err != nil {
		return nil, err
	}
	b.journal = j
	return b, nil
}

// CreateAccounts opens accounts with the same opening balance, in one
// transaction. It is setup, not an operation, so it runs directly.
func (b *Bank) CreateAccounts(ctx context.Context, balance int64, ids ...AccountID) error {
	if balance < 0 {
		return fmt.Errorf("ledger: opening balance %d: %w", balance, ErrInvalidAmount)
	}
	return b.st.createAccounts(ctx, ids, balance)
}

// Deposit adds amount (> 0) to id. It fails with ErrOverflow, changing
// nothing, if the balance would pass math.MaxInt64. With a RequestID among
// opts, a retry of it is carried out once (see RequestID).
func (b *Bank) Deposit(ctx context.Context, id AccountID, amount int64, opts ...OpOption) (Pending, error) {
	return b.change(ctx, OpDeposit, id, amount, amount, opts, seqsched.Normal)
}

// Withdraw takes amount (> 0) from id. It fails with ErrInsufficientFunds,
// changing nothing, if the balance is lower; with Config.HaltWithdrawals
// that failure halts the account (see Resume). With a RequestID among
// opts, a retry of it is carried out once.
func (b *Bank) Withdraw(ctx context.Context, id AccountID, amount int64, opts ...OpOption) (Pending, error) {
	if b.halt {
		return b.change(ctx, OpWithdraw, id, amount, -amount, opts, seqsched.HaltOnError)
	}
	return b.change(ctx, OpWithdraw, id, amount, -amount, opts, seqsched.Normal)
}

func (b *Bank) change(ctx context.Context, op Op, id AccountID, amount, delta int64, opts []OpOption, topts ...seqsched.TaskOption) (Pending, error) {
	if amount <= 0 {
		return nil, &OpError{Op: op, Account: id, Amount: amount, Err: ErrInvalidAmount}
	}
	req, err := requestOf(opts)
	if err != nil {
		return nil, &OpError{Op: op, Account: id, Amount: amount, Err: err}
	}
	return b.run(ctx, op, id, amount, func(ctx context.Context) (Receipt, error) {
		return b.st.change(ctx, op, id, delta, req)
	}, topts...)
}

// Balance reads id's balance after every operation submitted before it.
func (b *Bank) Balance(ctx context.Context, id AccountID) (Pending, error) {
	return b.run(ctx, OpBalance, id, 0, func(ctx context.Context) (Receipt, error) {
		return b.st.read(ctx, OpBalance, id)
	})
}

// Freeze marks id frozen so that later deposits, withdrawals and transfers
// fail with ErrFrozen. It is High priority: it runs before every operation
// already queued for id (but after the one running).
func (b *Bank) Freeze(ctx context.Context, id AccountID) (Pending, error) {
	return b.run(ctx, OpFreeze, id, 0, func(ctx context.Context) (Receipt, error) {
		return b.st.freeze(ctx, id)
	}, seqsched.High)
}

// Audit snapshots id's state. It is High priority: the snapshot is taken
// before the operations already queued for id run.
func (b *Bank) Audit(ctx context.Context, id AccountID) (Pending, error) {
	return b.run(ctx, OpAudit, id, 0, func(ctx context.Context) (Receipt, error) {
		return b.st.read(ctx, OpAudit, id)
	}, seqsched.High)
}

// run submits fn as the next operation on id's session (or, Unordered, on a
// goroutine of its own) with opts, measures it, and has the journal follow
// it.
func (b *Bank) run(ctx context.Context, op Op, id AccountID, amount int64,
	fn func(context.Context) (Receipt, error), opts ...seqsched.TaskOption) (Pending, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return nil, &OpError{Op: op, Account: id, Amount: amount, Err: ErrClosed}
	}
	task := b.measured(op, id, amount, fn)
	var p Pending
	if b.sched == nil {
		p = b.loosely(ctx, task)
	} else {
		f, err := seqsched.Submit(ctx, b.sched, id, task, opts...)
		if err != nil {
			return nil, &OpError{Op: op, Account: id, Amount: amount, Err: err}
		}
		p = f
	}
	if err := b.journal.follow(ctx, id, p); err != nil {
		return nil, err // cannot happen before Close; kept honest
	}
	return p, nil
}

// measured wraps fn so that its latency (from submission to commit) is
// recorded and its error says which operation failed.
func (b *Bank) measured(op Op, id AccountID, amount int64, fn func(context.Context) (Receipt, error)) func(context.Context) (Receipt, error) {
	start := time.Now()
	return func(ctx context.Context) (Receipt, error) {
		r, err := fn(ctx)
		b.stats.observe(time.Since(start), err)
		if err != nil {
			if _, ok := err.(*OpError); !ok {
				err = &OpError{Op: op, Account: id, Amount: amount, Err: err}
			}
		}
		return r, err
	}
}

// Close stops accepting operations, waits for every accepted one to commit
// (or fail) and for its journal line, then returns. If ctx ends first it
// gives up: queued operations fail with seqsched.ErrClosed and Close returns
// ctx's error. Operations held by a halted account wait for Resume or
// Discard (which work during Close) like any other. It does not close the
// database.
func (b *Bank) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	var err error
	if b.sched != nil {
		err = b.sched.Shutdown(ctx)
	}
	b.loose.Wait()
	if jerr := b.journal.close(ctx); err == nil {
		err = jerr
	}
	return err
}

// Stats returns how many operations completed, how many failed, and their
// latency from submission to completion.
func (b *Bank) Stats() Stats { return b.stats.snapshot() }
