package seqpg

// Running a key: each leased key is a seqsched session, and each of its
// jobs one task on it. A step takes the job's transaction (its key's
// open group, chain.go, or else one begun here in the round trip of the
// first read), in which the key's next job was read (the first row of
// (key, lane, seq), locked); it runs the handler and records the outcome:
// complete (in the group), retry, halt or dead-letter (each rolled back
// to the job's savepoint, recorded and committed with the group). Every
// outcome is fenced: it commits only if the key's lease is still this
// worker's token, unexpired, checked under the key's row lock. After a
// complete or a dead-letter the step posts the key's next step;
// otherwise the group ends and the key is given back or dropped. The
// commit of a group that ran the key's last jobs gives the key back
// itself.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/internal/intercept"
	"github.com/seqsched/seqsched/internal/logkey"
)

var errNoRows = pgx.ErrNoRows

const (
	// sqlHead reads and locks the key's next job, if the lease is still
	// ours and the key neither paused nor halted, with the key's pending
	// count (chain.go).
	sqlHead = `
SELECT j.id, j.lane, j.seq, j.kind, j.payload, coalesce(j.tag, ''), j.attempt, j.enqueued_at, k.pending
FROM seqpg_jobs j JOIN seqpg_keys k ON k.key = j.key
WHERE j.key = $1 AND k.lease_token = $2 AND k.lease_until > clock_timestamp()
	AND NOT k.paused AND NOT k.halted
ORDER BY j.lane, j.seq LIMIT 1
FOR UPDATE OF j`

	// sqlFence locks the key's row if the lease is still ours; the
	// failure statements build on it. They, and every statement that
	// ends a job, name the job by its id alone, fenced by EXISTS (SELECT
	// 1 FROM k): a job never changes key, and a condition on its key as
	// well lets the planner, when its statistics take seqpg_jobs for
	// empty, walk the key's whole backlog by seqpg_jobs_order, or the
	// whole table, instead of looking the id up (depth_test.go).
	sqlFence = `
WITH k AS (
	SELECT key FROM seqpg_keys
	WHERE key = $1 AND lease_token = $2 AND lease_until > clock_timestamp()
	FOR UPDATE)`

	sqlRetry = sqlFence + `,
r AS (
	UPDATE seqpg_keys SET lease_owner = NULL, lease_until = '-infinity',
		run_after = clock_timestamp() + $5 * interval '1 millisecond'
	WHERE key IN (SELECT key FROM k)),
j AS (
	UPDATE seqpg_jobs SET attempt = attempt + 1, started_at = coalesce(started_at, now()), last_error = $4
	WHERE id = $3 AND EXISTS (SELECT 1 FROM k))
SELECT count(*) FROM k`

	sqlHalt = sqlFence + `,
r AS (
	UPDATE seqpg_keys SET lease_owner = NULL, lease_until = '-infinity', run_after = clock_timestamp(),
		halted = true, halt_error = $4
	WHERE key IN (SELECT key FROM k)),
j AS (
	UPDATE seqpg_jobs SET attempt = attempt + 1, started_at = coalesce(started_at, now()), last_error = $4
	WHERE id = $3 AND EXISTS (SELECT 1 FROM k))
SELECT count(*) FROM k`

	sqlDead = sqlFence + `,
d AS (
	DELETE FROM seqpg_jobs WHERE id = $3 AND EXISTS (SELECT 1 FROM k) RETURNING *),
u AS (
	UPDATE seqpg_keys SET pending = pending - (SELECT count(*) FROM d),
		lease_until = clock_timestamp() + $5 * interval '1 millisecond',
		run_after = clock_timestamp() + $5 * interval '1 millisecond'
	WHERE key IN (SELECT key FROM k)),
i AS (
	INSERT INTO seqpg_dead (id, key, lane, seq, kind, payload, tag, attempts, enqueued_at, error)
	SELECT id, key, lane, seq, kind, payload, tag, attempt + 1, enqueued_at, $4 FROM d)
SELECT count(*) FROM k`
)

// step returns the task that runs l's key's next job.
func (w *Worker) step(l *lease) func(context.Context) error {
	return func(ctx context.Context) error {
		w.mu.Lock()
		stopping := w.stopping
		w.mu.Unlock()
		if stopping || w.closing() {
			w.release(l)
			return nil
		}
		if l.ctx.Err() != nil {
			w.expired(l, "the lease expired unrenewed before the key's next step")
			return nil
		}
		if w.cfg.batch > 0 {
			w.runBatched(ctx, l)
			return nil
		}
		w.runJob(ctx, l)
		return nil
	}
}

// runJob runs the key's next job, records its outcome and continues the
// key or ends it. Whatever the handler does (returns, panics, calls
// runtime.Goexit) the outcome is recorded by the deferred finish.
func (w *Worker) runJob(ctx context.Context, l *lease) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopOnLoss := context.AfterFunc(l.ctx, cancel)
	defer stopOnLoss()

	c := l.takeChain()
	if c.tx == nil {
		// The begin goes in the round trip of the first read.
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		w.queueHead(b, l, &c.job, &c.last)
		br := w.pool.SendBatch(ctx, b)
		c.tx = br.Tx()
		if err := br.Close(); err != nil {
			rollback(c.tx)
			w.dbError(ctx, "read job", err)
			w.release(l)
			return
		}
		if c.job == nil {
			rollback(c.tx)
			w.release(l)
			return
		}
	}
	if c.k == 0 {
		c.since = time.Now()
	}
	// The transaction is rolled back when the step ends, unless finish
	// committed it or left it in the lease for the key's next job.
	settled := false
	defer func() {
		if !settled {
			c.tx.Rollback(context.WithoutCancel(ctx))
		}
	}()

	hctx := context.WithValue(ctx, fenceKey{}, Fence{Key: l.key, Token: l.token})
	hctx = context.WithValue(hctx, workerKey{}, w)
	jtx := &jobTx{Tx: c.tx, ctx: hctx}
	returned := false
	var herr error
	defer func() {
		if !returned {
			if r := recover(); r != nil {
				herr = &seqsched.PanicError{Value: r, Stack: debug.Stack()}
			} else {
				herr = errGoexit
			}
			jtx.ended.Store(true)
			c.sp = jtx.sp
			settled = w.finish(ctx, l, c, herr)
		}
	}()
	herr = w.call(hctx, jtx, c.job)
	returned = true
	jtx.ended.Store(true)
	c.sp = jtx.sp
	if l.ctx.Err() != nil {
		w.expiredRunning(l, c.tx, c.job)
		settled = true
		return
	}
	settled = w.finish(ctx, l, c, herr)
}

var errGoexit = fmt.Errorf("seqpg: handler called runtime.Goexit: %w", seqsched.ErrGoexit)

// call runs the handler through the interceptors.
func (w *Worker) call(ctx context.Context, tx pgx.Tx, job *Job) error {
	h := func(ctx context.Context, j *Job) error { return w.handler(ctx, tx, j) }
	return intercept.Chain(h, w.cfg.interceptors)(ctx, job)
}

// finish records the outcome of c.job's attempt in c's transaction and
// continues or ends l. It reports whether it committed or rolled back
// c.tx, or left it in the lease for the key's next job (then the caller
// must not roll it back).
func (w *Worker) finish(ctx context.Context, l *lease, c chain, herr error) (settled bool) {
	if herr == nil {
		return w.complete(ctx, l, c)
	}
	w.fail(ctx, l, c.job, herr, &c)
	return true
}

// fail records the failure of job's attempt, fenced: in c's transaction,
// after a rollback to the job's savepoint (if its handler used the
// transaction) and with the completions of
// c's group before it, all committed in one round trip; or, without c
// (WithBatchedCompletion), in a statement of its own.
func (w *Worker) fail(ctx context.Context, l *lease, job *Job, herr error, c *chain) {
	// The outcome is recorded even when ctx ended (Close gave up): a
	// failure is a fact, and the fence still guards it.
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.lease)
	defer cancel()
	terminal := errors.Is(herr, ErrTerminal)
	msg := herr.Error()
	var kind failKind
	var sql string
	var args []any
	var d time.Duration
	switch {
	case !terminal && job.Attempt < w.cfg.attempts:
		kind, d = failRetry, w.backoff(octx, job, herr)
		sql, args = sqlRetry, []any{l.key, l.token, job.ID, msg, ms(d)}
	case w.cfg.haltOnError:
		kind = failHalt
		sql, args = sqlHalt, []any{l.key, l.token, job.ID, msg}
	default:
		kind = failDead
		sql, args = sqlDead, []any{l.key, l.token, job.ID, msg, ms(w.cfg.lease)}
	}
	sent := time.Now()
	var n int
	var err error
	group := 0
	if c == nil {
		err = w.pool.QueryRow(octx, sql, args...).Scan(&n)
	} else {
		group = c.k
		b := &pgx.Batch{}
		if c.sp {
			b.Queue(sqlRollbackSavepoint)
		}
		if group > 0 {
			b.Queue(sqlSettle, l.key, l.token, 0, ms(w.cfg.lease), group)
		}
		b.Queue(sql, args...).QueryRow(func(r pgx.Row) error { return r.Scan(&n) })
		if err = c.tx.SendBatch(octx, b).Close(); err == nil && n == 1 {
			err = c.tx.Commit(octx)
		} else {
			rollback(c.tx)
		}
	}
	if isLeaseLost(err) {
		n, err = 0, nil
	}
	if err != nil {
		w.dbError(octx, "record failure", err)
		w.release(l)
		return
	}
	if n != 1 {
		w.lost(l, job)
		return
	}
	w.n.completed.Add(uint64(group))
	switch kind {
	case failRetry:
		w.n.retried.Add(1)
		w.log(slog.LevelWarn, "seqpg: job failed; retrying after backoff", "key", logkey.Cut(l.key),
			"job", job.ID, "attempt", job.Attempt, "backoff", d, "err", herr)
		w.drop(l) // the key is given back, ready after the backoff
	case failHalt:
		w.n.halted.Add(1)
		w.log(slog.LevelError, "seqpg: job failed; key halted until Resume or Discard", "key", logkey.Cut(l.key),
			"job", job.ID, "attempts", job.Attempt, "err", herr)
		w.drop(l)
	default:
		l.renewed(sent, w.cfg.lease)
		w.n.deadLettered.Add(1)
		w.log(slog.LevelError, "seqpg: job failed; moved to seqpg_dead", "key", logkey.Cut(l.key),
			"job", job.ID, "attempts", job.Attempt, "err", herr)
		w.next(l)
	}
}

type failKind int

const (
	failRetry failKind = iota
	failHalt
	failDead
)

// backoff calls the BackoffFunc on a goroutine of its own, so that a
// panic or runtime.Goexit in it is logged and DefaultBackoff gives the
// wait, and the key's failure is still recorded.
func (w *Worker) backoff(ctx context.Context, job *Job, herr error) time.Duration {
	d := DefaultBackoff(ctx, job, job.Attempt, herr)
	done := make(chan struct{})
	go func() {
		defer close(done)
		returned := false
		defer func() {
			if !returned {
				w.log(slog.LevelError, "seqpg: backoff panicked or called runtime.Goexit; using DefaultBackoff",
					"panic", recover())
			}
		}()
		v := w.cfg.backoff(ctx, job, job.Attempt, herr)
		returned = true
		d = v
	}()
	<-done
	return d
}

// next posts l's key's next step, behind whatever the key's session has
// queued, so that keys take turns under seqsched.
func (w *Worker) next(l *lease) {
	if err := w.sched.Post(context.Background(), l.key, w.step(l)); err != nil {
		w.release(l) // shutting down: give the key back
	}
}
