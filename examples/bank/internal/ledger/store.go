package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite", pure Go
)

// OpenDB opens the database named by dsn and creates the tables if needed.
// A dsn starting with postgres:// or postgresql:// is opened with pgx; any
// other dsn is a SQLite file path.
//
// Every statement in this package is written once and runs on both: $N
// placeholders, UPDATE ... RETURNING, and no engine-specific types.
func OpenDB(ctx context.Context, dsn string) (*sql.DB, error) {
	var db *sql.DB
	var err error
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		db, err = sql.Open("pgx", dsn)
		if err == nil {
			db.SetMaxOpenConns(16) // well under Postgres's default of 100 clients
		}
	} else {
		// WAL with synchronous(NORMAL): a commit is in the WAL file
		// before Commit returns, so killing the process loses nothing
		// committed (an OS crash may lose the last commits; use FULL
		// for that). SQLite has one writer at a time, so one connection
		// avoids SQLITE_BUSY altogether: tasks simply queue for it.
		q := url.Values{}
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Add("_pragma", "busy_timeout(5000)")
		db, err = sql.Open("sqlite", "file:"+dsn+"?"+q.Encode())
		if err == nil {
			db.SetMaxOpenConns(1)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func migrate(ctx context.Context, db *sql.DB) error {
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS accounts (
			id      BIGINT PRIMARY KEY,
			balance BIGINT NOT NULL CHECK (balance >= 0),
			frozen  BOOLEAN NOT NULL DEFAULT FALSE,
			version BIGINT NOT NULL DEFAULT 0
		)`,
		// One row per committed change, written in the same transaction.
		`CREATE TABLE IF NOT EXISTS ledger (
			account BIGINT NOT NULL,
			version BIGINT NOT NULL,
			op      TEXT NOT NULL,
			amount  BIGINT NOT NULL,
			balance BIGINT NOT NULL,
			PRIMARY KEY (account, version)
		)`,
		// One row per operation submitted with a RequestID, written in
		// the operation's transaction: a retry finds it and gets the
		// first answer instead of applying the change twice.
		`CREATE TABLE IF NOT EXISTS requests (
			id      TEXT PRIMARY KEY,
			op      TEXT NOT NULL,
			account BIGINT NOT NULL,
			payee   BIGINT NOT NULL,
			amount  BIGINT NOT NULL,
			balance BIGINT NOT NULL,
			version BIGINT NOT NULL
		)`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("ledger: create tables: %w", err)
		}
	}
	return nil
}

// store runs one transaction per operation. It does no ordering of its own:
// callers run at most one operation per account at a time.
type store struct {
	db *sql.DB
}

// createAccounts inserts accounts with an opening balance, all or none.
func (st store) createAccounts(ctx context.Context, ids []AccountID, balance int64) error {
	return st.inTx(ctx, func(tx *sql.Tx) error {
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO accounts (id, balance) VALUES ($1, $2)`, int64(id), balance); err != nil {
				return fmt.Errorf("ledger: create account %d: %w", id, err)
			}
		}
		return nil
	})
}

// change adds delta (negative for a withdrawal) to id's balance and records
// it in the ledger table, in one transaction. It fails, changing nothing,
// if the account is unknown or frozen or the balance would go negative or
// overflow. With a request ID it is done once: see once.
func (st store) change(ctx context.Context, op Op, id AccountID, delta int64, req RequestID) (Receipt, error) {
	var r Receipt
	err := st.inTx(ctx, func(tx *sql.Tx) error {
		return once(ctx, tx, req, Receipt{Op: op, Account: id, Amount: abs(delta)}, &r, func() (err error) {
			r, err = changeTx(ctx, tx, op, id, delta)
			return err
		})
	})
	return r, err
}

// changeTx adds delta to id's balance. The guard keeps the new balance in
// 0..math.MaxInt64 without computing an out-of-range sum: SQLite would turn
// it into a float, and Postgres fail with its own error.
func changeTx(ctx context.Context, tx *sql.Tx, op Op, id AccountID, delta int64) (Receipt, error) {
	r := Receipt{Op: op, Account: id, Amount: abs(delta)}
	lo, hi := int64(0), int64(math.MaxInt64) // the balance before, for the result to be in range
	if delta < 0 {
		lo = -delta
	} else {
		hi -= delta
	}
	err := tx.QueryRowContext(ctx, `
		UPDATE accounts SET balance = balance + $1, version = version + 1
		WHERE id = $2 AND NOT frozen AND balance >= $3 AND balance <= $4
		RETURNING balance, version`, delta, int64(id), lo, hi).Scan(&r.Balance, &r.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return r, whyNot(ctx, tx, id, delta)
	}
	if err != nil {
		return r, err
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO ledger (account, version, op, amount, balance) VALUES ($1, $2, $3, $4, $5)`,
		int64(id), r.Version, string(op), delta, r.Balance)
	return r, err
}

// whyNot explains why the guarded UPDATE adding delta matched no row.
func whyNot(ctx context.Context, tx *sql.Tx, id AccountID, delta int64) error {
	var frozen bool
	var balance int64
	err := tx.QueryRowContext(ctx, `SELECT frozen, balance FROM accounts WHERE id = $1`, int64(id)).
		Scan(&frozen, &balance)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrUnknownAccount
	case err != nil:
		return err
	case frozen:
		return ErrFrozen
	case delta > 0:
		return fmt.Errorf("%w (balance %d)", ErrOverflow, balance)
	}
	return fmt.Errorf("%w (balance %d)", ErrInsufficientFunds, balance)
}

// once runs apply, which leaves the operation's receipt in *r, at most once
// per request ID, in transaction tx: want describes the operation. Without
// an ID it just runs apply. With one, a first call runs apply and records
// the ID with the receipt in the same transaction, so that both commit or
// neither does; a later call with the same ID and the same operation
// leaves the first receipt in *r, marked Replayed, and changes nothing; one
// with a different operation fails with ErrRequestReused. The account's
// order makes the check and the insert safe: two calls with one ID on one
// account never overlap. (On two accounts, the primary key refuses the
// second insert.)
func once(ctx context.Context, tx *sql.Tx, req RequestID, want Receipt, r *Receipt, apply func() error) error {
	if req == "" {
		return apply()
	}
	var got Receipt
	var op string
	var account, payee int64
	err := tx.QueryRowContext(ctx, `
		SELECT op, account, payee, amount, balance, version FROM requests WHERE id = $1`, string(req)).
		Scan(&op, &account, &payee, &got.Amount, &got.Balance, &got.Version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	default:
		got.Op, got.Account, got.To, got.Replayed = Op(op), AccountID(account), AccountID(payee), true
		if got.Op != want.Op || got.Account != want.Account || got.To != want.To || got.Amount != want.Amount {
			return fmt.Errorf("%w (%q: %s)", ErrRequestReused, string(req), got)
		}
		*r = got
		return nil
	}
	if err := apply(); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `
		INSERT INTO requests (id, op, account, payee, amount, balance, version) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		string(req), string(r.Op), int64(r.Account), int64(r.To), r.Amount, r.Balance, r.Version)
	return err
}

// transfer moves amount from one account to another in one transaction,
// once per request ID (see once).
func (st store) transfer(ctx context.Context, from, to AccountID, amount int64, req RequestID) (Receipt, error) {
	var r Receipt
	err := st.inTx(ctx, func(tx *sql.Tx) error {
		want := Receipt{Op: OpTransfer, Account: from, To: to, Amount: amount}
		return once(ctx, tx, req, want, &r, func() (err error) {
			if r, err = changeTx(ctx, tx, OpTransfer, from, -amount); err != nil {
				return err
			}
			r.To = to
			if _, err = changeTx(ctx, tx, OpTransfer, to, amount); err != nil {
				return fmt.Errorf("payee: %w", err)
			}
			return nil
		})
	})
	r.To = to
	return r, err
}

// freeze marks id frozen: later deposits, withdrawals and transfers fail.
func (st store) freeze(ctx context.Context, id AccountID) (Receipt, error) {
	r := Receipt{Op: OpFreeze, Account: id, Frozen: true}
	err := st.inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `
			UPDATE accounts SET frozen = TRUE, version = version + 1 WHERE id = $1
			RETURNING balance, version`, int64(id)).Scan(&r.Balance, &r.Version)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrUnknownAccount
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `
			INSERT INTO ledger (account, version, op, amount, balance) VALUES ($1, $2, $3, 0, $4)`,
			int64(id), r.Version, string(OpFreeze), r.Balance)
		return err
	})
	return r, err
}

// read returns id's current state.
func (st store) read(ctx context.Context, op Op, id AccountID) (Receipt, error) {
	r := Receipt{Op: op, Account: id}
	err := st.db.QueryRowContext(ctx, `SELECT balance, frozen, version FROM accounts WHERE id = $1`,
		int64(id)).Scan(&r.Balance, &r.Frozen, &r.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return r, ErrUnknownAccount
	}
	return r, err
}

// inTx runs fn in a transaction and commits it, or rolls back if fn fails.
func (st store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback() // the error that matters is fn's
		return err
	}
	return tx.Commit()
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
