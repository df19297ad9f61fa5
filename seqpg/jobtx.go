package seqpg

// The handler's tx: a view of the job's group transaction (chain.go) that
// cannot end it, and that opens the job's savepoint on its first use, so
// that a failed job's writes roll back alone. A handler that does not use
// tx costs the group no savepoint at all; a first Exec with arguments
// carries the savepoint in its own round trip, other first uses send it
// in one more. The view ends when its handler returns: a tx kept past
// the handler (handed to a goroutine that outlives it) would otherwise
// write into the key's later jobs' group.

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// jobTx is the handler's view of its job's transaction: everything of
// pgx.Tx but its end, which belongs to the job's group. A nested
// transaction (Begin) is a savepoint inside the job's. ctx is the
// handler's, for the savepoint of the methods that take none. The worker
// sets ended when the handler returns; from then on every method fails.
type jobTx struct {
	pgx.Tx
	ctx   context.Context
	sp    bool // the job's savepoint is made
	ended atomic.Bool
}

// errEnded is what a method of the view returns once its handler returned.
var errEnded = fmt.Errorf("seqpg: the handler's tx used after its handler returned: %w", ErrJobTx)

// live returns errEnded once the handler returned.
func (t *jobTx) live() error {
	if t.ended.Load() {
		return errEnded
	}
	return nil
}

// savepoint makes the job's savepoint, once, while the handler runs.
func (t *jobTx) savepoint(ctx context.Context) error {
	if err := t.live(); err != nil {
		return err
	}
	if t.sp {
		return nil
	}
	if _, err := t.Tx.Exec(ctx, sqlSavepoint); err != nil {
		return err
	}
	t.sp = true
	return nil
}

// Commit returns an error wrapping ErrJobTx and changes nothing: the
// job's writes commit with its completion.
func (*jobTx) Commit(context.Context) error {
	return fmt.Errorf("seqpg: Commit of the handler's tx: %w", ErrJobTx)
}

// Rollback returns an error wrapping ErrJobTx and changes nothing: the
// handler returns an error to roll the job's writes back.
func (*jobTx) Rollback(context.Context) error {
	return fmt.Errorf("seqpg: Rollback of the handler's tx: %w", ErrJobTx)
}

func (t *jobTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.savepoint(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Begin(ctx)
}

func (t *jobTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.savepoint(ctx); err != nil {
		return 0, err
	}
	return t.Tx.CopyFrom(ctx, table, cols, src)
}

func (t *jobTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.savepoint(ctx); err != nil {
		return errBatch{err}
	}
	return t.Tx.SendBatch(ctx, b)
}

// LargeObjects and Conn have no error to return: after the handler
// returned they panic, as a misuse.
func (t *jobTx) LargeObjects() pgx.LargeObjects {
	if t.ended.Load() {
		panic("seqpg: LargeObjects of the handler's tx after its handler returned")
	}
	t.savepoint(t.ctx) // an error here is the first large object call's
	return t.Tx.LargeObjects()
}

func (t *jobTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.savepoint(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Prepare(ctx, name, sql)
}

// Exec sends the job's savepoint, if not yet made, in the same round trip
// when the statement has arguments. One without is sent with the simple
// protocol, which may hold several statements, and one whose first
// argument is a pgx.QueryExecMode chooses a mode a batch does not take:
// those go after the savepoint.
func (t *jobTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.live(); err != nil {
		return pgconn.CommandTag{}, err
	}
	if _, mode := firstArg(args).(pgx.QueryExecMode); t.sp || len(args) == 0 || mode {
		if err := t.savepoint(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		return t.Tx.Exec(ctx, sql, args...)
	}
	var tag pgconn.CommandTag
	b := &pgx.Batch{}
	b.Queue(sqlSavepoint).Exec(func(pgconn.CommandTag) error {
		t.sp = true
		return nil
	})
	b.Queue(sql, args...).Exec(func(ct pgconn.CommandTag) error {
		tag = ct
		return nil
	})
	err := t.Tx.SendBatch(ctx, b).Close()
	return tag, err
}

func (t *jobTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.savepoint(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t *jobTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.savepoint(ctx); err != nil {
		return errRow{err}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

func (t *jobTx) Conn() *pgx.Conn {
	if t.ended.Load() {
		panic("seqpg: Conn of the handler's tx after its handler returned")
	}
	t.savepoint(t.ctx) // an error here is the caller's first statement's
	return t.Tx.Conn()
}

func firstArg(args []any) any {
	if len(args) == 0 {
		return nil
	}
	return args[0]
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }
