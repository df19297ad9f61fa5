// Package durable is the bank's durable mode: every operation is a
// seqpg job keyed by its account, enqueued in the same transaction as the
// request's record, and applied by worker processes in the transaction
// that completes the job. A worker killed mid-run loses nothing: its
// operations run again on the next worker, in order, and each is applied
// once, because the balance change and the job's completion commit
// together.
package durable

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/seqsched/seqsched/seqpg"
)

// Op is what an operation does to its account.
type Op string

// The operations.
const (
	Deposit  Op = "deposit"
	Withdraw Op = "withdraw"
)

// ErrOverdraft is a withdrawal larger than the balance: with operations in
// order, the bank's script never meets it.
var ErrOverdraft = errors.New("bank: overdraft")

const schema = `
CREATE TABLE IF NOT EXISTS accounts (id bigint PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE IF NOT EXISTS requests (
	id bigserial PRIMARY KEY, account bigint NOT NULL, op text NOT NULL, amount bigint NOT NULL);
CREATE TABLE IF NOT EXISTS applied (
	request bigint PRIMARY KEY, account bigint NOT NULL, op text NOT NULL, amount bigint NOT NULL,
	balance bigint NOT NULL, at bigserial)`

// Setup creates the bank's tables and seqpg's.
func Setup(ctx context.Context, pool *pgxpool.Pool) error {
	if err := seqpg.Migrate(ctx, pool); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, schema)
	return err
}

// Open creates n accounts, 1..n, each with balance.
func Open(ctx context.Context, pool *pgxpool.Pool, n int, balance int64) error {
	_, err := pool.Exec(ctx, `INSERT INTO accounts SELECT g, $2 FROM generate_series(1, $1) g`, n, balance)
	return err
}

func key(account int64) string { return "account-" + strconv.FormatInt(account, 10) }

// Submit records an operation and enqueues it in one transaction: the
// operation will run if and only if Submit returns nil.
func Submit(ctx context.Context, pool *pgxpool.Pool, account int64, op Op, amount int64) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO requests (account, op, amount) VALUES ($1, $2, $3) RETURNING id`,
			account, op, amount).Scan(&id); err != nil {
			return err
		}
		_, err := seqpg.Enqueue(ctx, tx, key(account), []byte(strconv.FormatInt(id, 10)))
		return err
	})
}

// Apply is the worker's handler: it applies the request in the job's
// transaction. An overdraft is terminal, and halts the account when the
// worker has seqpg.WithHaltOnError.
func Apply(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
	id, err := strconv.ParseInt(string(job.Payload), 10, 64)
	if err != nil {
		return seqpg.Terminal(fmt.Errorf("bank: bad payload %q", job.Payload))
	}
	var account, amount int64
	var op Op
	if err := tx.QueryRow(ctx, `SELECT account, op, amount FROM requests WHERE id = $1`, id).
		Scan(&account, &op, &amount); err != nil {
		return err
	}
	delta := amount
	if op == Withdraw {
		delta = -amount
	}
	var balance int64
	err = tx.QueryRow(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1 AND balance + $2 >= 0
		RETURNING balance`, account, delta).Scan(&balance)
	if errors.Is(err, pgx.ErrNoRows) {
		return seqpg.Terminal(fmt.Errorf("%w: account %d, %s %d", ErrOverdraft, account, op, amount))
	}
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO applied (request, account, op, amount, balance) VALUES ($1, $2, $3, $4, $5)`,
		id, account, op, amount, balance)
	return err
}

// NewWorker returns a worker that applies the bank's operations; an
// overdraft halts its account for an operator.
func NewWorker(pool *pgxpool.Pool, opts ...seqpg.Option) (*seqpg.Worker, error) {
	return seqpg.NewWorker(pool, Apply, append([]seqpg.Option{seqpg.WithHaltOnError()}, opts...)...)
}

// Report is what Check found.
type Report struct {
	Requests   int // operations submitted
	Applied    int // operations applied
	Twice      int // operations applied more than once
	OutOfOrder int // operations applied before an earlier one of their account
	Unapplied  int // operations not applied
	Nonzero    int // accounts whose balance is not target
	Halted     int // accounts halted (an operation failed)
}

// OK reports whether every operation was applied once, in order, and
// every balance is the target.
func (r Report) OK() bool {
	return r.Applied == r.Requests && r.Twice == 0 && r.OutOfOrder == 0 && r.Unapplied == 0 &&
		r.Nonzero == 0 && r.Halted == 0
}

// Check reads the bank's tables and reports against target, the balance
// every account should end at. Requests of one account must be applied in
// the order of their IDs, which is the order Submit committed them in when
// each account's operations are submitted one after another.
func Check(ctx context.Context, pool *pgxpool.Pool, target int64) (Report, error) {
	var r Report
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM requests),
		(SELECT count(*) FROM applied),
		(SELECT count(*) FROM (SELECT request FROM applied GROUP BY request HAVING count(*) > 1) d),
		(SELECT count(*) FROM (
			SELECT request < lag(request) OVER (PARTITION BY account ORDER BY at) AS back FROM applied) o
			WHERE back),
		(SELECT count(*) FROM requests q WHERE NOT EXISTS (SELECT 1 FROM applied a WHERE a.request = q.id)),
		(SELECT count(*) FROM accounts WHERE balance <> $1),
		(SELECT count(*) FROM seqpg_keys WHERE halted)`, target).
		Scan(&r.Requests, &r.Applied, &r.Twice, &r.OutOfOrder, &r.Unapplied, &r.Nonzero, &r.Halted)
	return r, err
}
