package seqpg

// Group commit (the default mode): a held key runs its next jobs in one
// transaction, each job's writes under a savepoint of its own, and
// commits them together: every WithGroupCommit n jobs, after its time
// bound, or when the key has no job left. A job's completion and the
// read of the key's next job are one statement, in one round trip:
//
//	RELEASE SAVEPOINT seqpg_job  -- if the handler made it (jobtx.go)
//	delete job n, and read and lock the key's next job (fenced, as every read of a job)
//
// The savepoint is made by the handler's tx before its first statement,
// so a handler that does not use tx costs none. A group's commit records
// its completions on the key's row (fenced: it raises seqpg_lease_lost()
// if the lease is not ours, and nothing commits), and, unless the chain
// is cut there or the key has no job left, chains the next group's
// transaction onto the commit and reads the key's next job in it:
//
//	settle the group's k jobs (fenced) and delete job n
//	COMMIT AND CHAIN             -- the group commits; the next one begins
//	SET LOCAL idle_in_transaction_session_timeout
//	read and lock the key's next job
//
// Each read also returns the key's pending count, so that the group of
// the key's last known job commits with it, giving the key back in the
// same statement, rather than after one more read that finds nothing.
//
// A failed job rolls back to its savepoint, and its failure (retry, halt,
// dead letter) is recorded and committed with the group's completions
// before it. A lost lease, a database error or a handler that returns
// after its lease expired locally rolls back the whole group: its jobs'
// effects and completions go together, and the jobs run again.
//
// Each statement reads with a snapshot of its own (READ COMMITTED, set at
// the transaction's begin), so Pause, a halt, a new High job, Replace and
// Discard, committed by others, take effect at the key's next job as
// they do with a transaction per job. The group touches the key's row
// only in its commit's round trip, so that enqueuers of the key, the
// controls and the lease renewal never wait for an open group.
//
// A chain holds one pooled connection from job to job, so it is cut every
// chainMax jobs (the group then commits on its own and the next job
// begins a new transaction): a key with an endless backlog gives its
// connection back to the pool, for other keys and for the renewals.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/seqsched/seqsched/internal/logkey"
)

// chainMax is how many jobs of a key run in one chain of transactions.
const chainMax = 16

// errCodeLeaseLost is the SQLSTATE of seqpg_lease_lost() (migration 2).
const errCodeLeaseLost = "SQ001"

const (
	// sqlSettle records a group's completions: the key's pending count
	// loses the group's $5 jobs, and the lease is extended, or, when they
	// were the key's last, the key is given back; job $3 (0: none) is
	// deleted. It returns the key's jobs left, and raises
	// seqpg_lease_lost() when the lease is no longer ours.
	sqlSettle = `
WITH k AS (
	UPDATE seqpg_keys SET pending = pending - $5,
		lease_owner = CASE WHEN pending > $5 THEN lease_owner END,
		lease_until = CASE WHEN pending > $5 THEN clock_timestamp() + $4 * interval '1 millisecond' ELSE '-infinity' END,
		run_after = CASE WHEN pending > $5 THEN clock_timestamp() + $4 * interval '1 millisecond' ELSE clock_timestamp() END
	WHERE key = $1 AND lease_token = $2 AND lease_until > clock_timestamp()
	RETURNING pending),
d AS (
	DELETE FROM seqpg_jobs WHERE id = $3 AND EXISTS (SELECT 1 FROM k) RETURNING 1)
SELECT CASE WHEN EXISTS (SELECT 1 FROM k) AND ($3 = 0 OR EXISTS (SELECT 1 FROM d))
	THEN (SELECT pending FROM k) ELSE seqpg_lease_lost() END`

	// sqlDoneNext deletes job $3 (its completion, committed with its
	// group) and reads and locks the key's next job, as sqlHead does.
	sqlDoneNext = `
WITH d AS (
	DELETE FROM seqpg_jobs WHERE id = $3)
SELECT j.id, j.lane, j.seq, j.kind, j.payload, coalesce(j.tag, ''), j.attempt, j.enqueued_at, k.pending
FROM seqpg_jobs j JOIN seqpg_keys k ON k.key = j.key
WHERE j.key = $1 AND j.id <> $3 AND k.lease_token = $2 AND k.lease_until > clock_timestamp()
	AND NOT k.paused AND NOT k.halted
ORDER BY j.lane, j.seq LIMIT 1
FOR UPDATE OF j`

	sqlSavepoint         = "SAVEPOINT seqpg_job"
	sqlReleaseSavepoint  = "RELEASE SAVEPOINT seqpg_job"
	sqlRollbackSavepoint = "ROLLBACK TO SAVEPOINT seqpg_job"
)

// chain is a lease's transaction between two jobs of its key: tx holds
// job's row lock and has run n jobs before it; the last k of them are the
// open group's, completed (deleted) in tx but not yet committed, the
// first of them started at since. last is true when job was the key's
// last job known when it was read. A chain is touched by the key's steps,
// one at a time, and by end and release; the lease's mutex orders them.
type chain struct {
	tx    pgx.Tx
	job   *Job
	n, k  int
	since time.Time
	last  bool
	sp    bool // job's handler made its savepoint (jobtx.go)
}

// takeChain returns the transaction and job the key's previous step left;
// a nil tx when there is none.
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
// any, with its group: the jobs stay queued.
func (l *lease) closeChain() {
	if c := l.takeChain(); c.tx != nil {
		rollback(c.tx)
	}
}

// settleChain commits the open group of l's chain, if any, before the key
// is given back, and lets the next job's row go. A lost lease or a
// database error rolls the group back: its jobs run again.
func (w *Worker) settleChain(ctx context.Context, l *lease) {
	c := l.takeChain()
	if c.tx == nil {
		return
	}
	if c.k == 0 {
		rollback(c.tx)
		return
	}
	_, err := w.commitGroup(ctx, l, c)
	switch {
	case isLeaseLost(err):
		w.lost(l, c.job)
	case err != nil:
		w.dbError(ctx, "complete", err)
	default:
		w.n.completed.Add(uint64(c.k))
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

// queueRead queues, on b, the read of the key's next job into *job (nil
// when the key has none ready for this lease) with sql and args; done is the number of jobs of the key deleted in the
// open group, read included, to tell whether the job is the key's last.
func (w *Worker) queueRead(b *pgx.Batch, l *lease, sql string, args []any, done int, job **Job, last *bool) {
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		if !rows.Next() {
			return rows.Err()
		}
		j := &Job{Key: l.key}
		var lane int16
		var attempt int
		var pending int64
		if err := rows.Scan(&j.ID, &lane, &j.Seq, &j.Kind, &j.Payload, &j.Tag, &attempt, &j.EnqueuedAt, &pending); err != nil {
			return err
		}
		j.High = lane == laneHigh
		j.Attempt = attempt + 1
		*job = j
		*last = pending-int64(done) <= 1
		return rows.Err()
	})
}

// queueHead queues, on b, the statements that make tx the job's
// transaction and read the key's next job into *job.
func (w *Worker) queueHead(b *pgx.Batch, l *lease, job **Job, last *bool) {
	// A frozen worker must not hold the job's row lock past its lease.
	b.Queue(fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", max(w.cfg.lease.Milliseconds(), 1)))
	w.queueRead(b, l, sqlHead, []any{l.key, l.token}, 0, job, last)
}

// complete records job's success in c's group and continues the key: in
// one round trip, the completion and the read of the key's next job, in
// the same group, or, when the group ends with job, the group's commit
// and, unless the chain is cut there, the read in a transaction chained
// onto it. It reports whether the next job's transaction is c.tx, left in
// the lease for the key's next step (then c.tx must not be rolled back).
func (w *Worker) complete(ctx context.Context, l *lease, c chain) (chained bool) {
	k := c.k + 1 // the group's jobs, job included
	commit := c.last || k >= w.cfg.groupJobs || time.Since(c.since) >= w.cfg.groupDelay
	if !commit {
		var next *Job
		var last bool
		b := &pgx.Batch{}
		if c.sp {
			b.Queue(sqlReleaseSavepoint)
		}
		w.queueRead(b, l, sqlDoneNext, []any{l.key, l.token, c.job.ID}, k, &next, &last)
		if err := c.tx.SendBatch(ctx, b).Close(); err != nil {
			rollback(c.tx)
			w.dbError(ctx, "complete", err)
			w.release(l)
			return true
		}
		if next != nil {
			l.keepChain(chain{tx: c.tx, job: next, n: c.n + 1, k: k, since: c.since, last: last})
			w.next(l)
			return true
		}
		// No job ready: the group commits now.
		c.job, c.k = nil, k
		w.endGroup(ctx, l, c)
		return true // committed or rolled back there
	}

	sent := time.Now()
	cont := c.n+1 < chainMax && !c.last
	committed := false
	var left int64 // the key's jobs left; 0: the key was given back
	var next *Job
	var last bool
	b := &pgx.Batch{}
	if c.sp {
		b.Queue(sqlReleaseSavepoint)
	}
	b.Queue(sqlSettle, l.key, l.token, c.job.ID, ms(w.cfg.lease), k).QueryRow(func(r pgx.Row) error {
		return r.Scan(&left)
	})
	if cont {
		b.Queue("COMMIT AND CHAIN").Exec(func(pgconn.CommandTag) error {
			committed = true
			return nil
		})
		w.queueHead(b, l, &next, &last)
	}
	err := c.tx.SendBatch(ctx, b).Close()
	if err == nil && !cont {
		if err = c.tx.Commit(ctx); err == nil {
			committed = true
		}
	}
	switch {
	case isLeaseLost(err):
		w.lost(l, c.job)
		return false
	case err != nil && !committed:
		rollback(c.tx)
		w.dbError(ctx, "complete", err)
		w.release(l)
		return true
	}
	w.n.completed.Add(uint64(k))
	if left == 0 {
		// The group gave the key back (its jobs were the key's last).
		if cont {
			rollback(c.tx)
		}
		w.drop(l)
		return true
	}
	l.renewed(sent, w.cfg.lease)
	switch {
	case err != nil:
		// Committed; the read of the next job failed.
		rollback(c.tx)
		w.dbError(ctx, "read job", err)
		w.release(l)
		return true
	case !cont:
		w.next(l)
		return true
	case next == nil:
		rollback(c.tx)
		w.release(l)
		return true // rolled back here
	}
	l.keepChain(chain{tx: c.tx, job: next, n: c.n + 1, last: last})
	w.next(l)
	return true
}

// endGroup commits c's group of c.k jobs, already deleted in c.tx, when
// the read of the key's next job found none ready for this lease (the key
// is empty, paused, halted, or the lease lost), and gives the key back.
func (w *Worker) endGroup(ctx context.Context, l *lease, c chain) {
	sent := time.Now()
	left, err := w.commitGroup(ctx, l, c)
	switch {
	case isLeaseLost(err):
		w.n.leaseLost.Add(1)
		w.log(slog.LevelWarn, "seqpg: lease lost; the group's transaction was rolled back",
			"key", logkey.Cut(l.key), "token", l.token, "err", ErrLeaseLost)
		w.drop(l)
		return
	case err != nil:
		w.dbError(ctx, "complete", err)
		w.release(l)
		return
	}
	w.n.completed.Add(uint64(c.k))
	if left == 0 {
		w.drop(l)
		return
	}
	l.renewed(sent, w.cfg.lease)
	w.release(l)
}

// commitGroup records c's group of c.k jobs on the key's row, fenced by
// l's token, and commits c.tx; on any error it rolls c.tx back. left is
// how many jobs the key still has.
func (w *Worker) commitGroup(ctx context.Context, l *lease, c chain) (left int64, err error) {
	b := &pgx.Batch{}
	b.Queue(sqlSettle, l.key, l.token, 0, ms(w.cfg.lease), c.k).QueryRow(func(r pgx.Row) error { return r.Scan(&left) })
	err = c.tx.SendBatch(ctx, b).Close()
	if err == nil {
		err = c.tx.Commit(ctx)
	}
	if err != nil {
		rollback(c.tx)
	}
	return left, err
}
