package seqpg

// Chained transactions (the default mode): a job's completion, its commit
// and the read of the key's next job go to the database in one round
// trip, so that a key with a backlog costs one round trip per job, not
// four (begin; read; complete; commit):
//
//	complete job n (fenced: raises seqpg_lease_lost() if the lease is not ours)
//	COMMIT AND CHAIN            -- job n's transaction commits; job n+1's begins
//	SET LOCAL idle_in_transaction_session_timeout
//	read and lock the key's next job (fenced, as every read of a job)
//
// Job n+1 is then read and locked in its own transaction, exactly as a
// step that began one would have read it: order, the High lane, Pause,
// halts, Replace and Discard see no difference. The fence raises rather
// than changing no row because nothing else would stop the commit queued
// behind it. The open transaction and its job wait in the lease for the
// key's next step (posted behind whatever the key's session has queued,
// as before), which runs the job in it.
//
// A chain holds one pooled connection from job to job, so it is cut every
// chainMax jobs (the completion then commits on its own and the next job
// begins a new transaction): a key with an endless backlog gives its
// connection back to the pool, for other keys and for the renewals.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// chainMax is how many jobs of a key run in one chain of transactions.
const chainMax = 16

// errCodeLeaseLost is the SQLSTATE of seqpg_lease_lost() (migration 2).
const errCodeLeaseLost = "SQ001"

// chain is a lease's transaction between two jobs of its key: tx holds
// job's row lock, and has run n jobs before it. It is touched by the
// key's steps, one at a time, and by end; the lease's mutex orders them.
type chain struct {
	tx  pgx.Tx
	job *Job
	n   int
}

// takeChain returns the transaction and job the key's previous step left,
// and how many jobs its chain ran; a nil tx when there is none.
func (l *lease) takeChain() chain {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.c
	l.c = chain{}
	return c
}

// keepChain leaves c for the key's next step, unless the lease has ended
// meanwhile: then c is rolled back, as end would have done.
func (l *lease) keepChain(c chain) {
	l.mu.Lock()
	if l.ctx.Err() == nil {
		l.c = c
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	rollback(c.tx)
}

// closeChain rolls back the transaction the key's next job waits in, if
// any: the job stays queued.
func (l *lease) closeChain() {
	if c := l.takeChain(); c.tx != nil {
		rollback(c.tx)
	}
}

func rollback(tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	tx.Rollback(ctx)
}

// rollbackTimeout bounds a rollback of a transaction no handler is in; a
// connection that does not answer is closed by pgx.
const rollbackTimeout = 5 * time.Second

// isLeaseLost reports whether err is seqpg_lease_lost()'s.
func isLeaseLost(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == errCodeLeaseLost
}

// queueHead queues, on b, the statements that make tx the job's
// transaction and read the key's next job into *job (nil when the key
// has none ready for this lease).
func (w *Worker) queueHead(b *pgx.Batch, l *lease, job **Job) {
	// A frozen worker must not hold the job's row lock past its lease.
	b.Queue(fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", max(w.cfg.lease.Milliseconds(), 1)))
	b.Queue(sqlHead, l.key, l.token).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		if !rows.Next() {
			return rows.Err()
		}
		j, err := scanJob(rows, l.key)
		if err != nil {
			return err
		}
		*job = j
		return rows.Err()
	})
}

// complete records job's success in tx, commits it with the handler's
// writes, and continues the key: in the same round trip, unless the chain
// is cut here, its next job is read in a transaction chained onto tx,
// which is left in the lease for the key's next step (chained is true).
func (w *Worker) complete(ctx context.Context, l *lease, ran int, tx pgx.Tx, job *Job) (chained bool) {
	sent := time.Now()
	cont := ran+1 < chainMax
	committed := false
	var left int64 // the key's jobs left; 0: the key was given back
	var next *Job
	b := &pgx.Batch{}
	b.Queue(sqlComplete, l.key, l.token, job.ID, ms(w.cfg.lease)).QueryRow(func(r pgx.Row) error {
		return r.Scan(&left)
	})
	if cont {
		b.Queue("COMMIT AND CHAIN").Exec(func(pgconn.CommandTag) error {
			committed = true
			return nil
		})
		w.queueHead(b, l, &next)
	}
	err := tx.SendBatch(ctx, b).Close()
	if err == nil && !cont {
		if err = tx.Commit(ctx); err == nil {
			committed = true
		}
	}
	switch {
	case isLeaseLost(err):
		w.lost(l, job)
		return false
	case err != nil && !committed:
		w.dbError(ctx, "complete", err)
		w.release(l)
		return false
	}
	w.n.completed.Add(1)
	if left == 0 {
		// The completion gave the key back (it was its last job): the
		// chained read found nothing.
		w.drop(l)
		return false
	}
	l.renewed(sent, w.cfg.lease)
	switch {
	case err != nil:
		// Committed; the read of the next job failed.
		w.dbError(ctx, "read job", err)
		w.release(l)
		return false
	case !cont:
		w.next(l)
		return false
	case next == nil:
		rollback(tx)
		w.release(l)
		return true // rolled back here
	}
	l.keepChain(chain{tx: tx, job: next, n: ran + 1})
	w.next(l)
	return true
}
