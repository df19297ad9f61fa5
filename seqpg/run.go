package seqpg

// Running a key: each leased key is a seqsched session, and each of its
// jobs one task on it. A step takes the job's transaction (opened by the
// previous job's completion, chain.go, or else begun here), in which the
// key's next job was read (the first row of (key, lane, seq), locked);
// it runs the handler and records the outcome: complete (in the same
// transaction, which commits and chains the next job's), retry, halt or
// dead-letter (each in one statement after the rollback). Every outcome
// is fenced: it is recorded only if the key's lease is still this
// worker's token, unexpired, checked under the key's row lock. After a
// complete or a dead-letter the step posts the key's next step;
// otherwise the chain ends and the key is given back or dropped. The
// completion of a key's last job gives the key back itself.

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
	sqlHead = `
SELECT j.id, j.lane, j.seq, j.kind, j.payload, coalesce(j.tag, ''), j.attempt, j.enqueued_at
FROM seqpg_jobs j
WHERE j.key = $1 AND EXISTS (
	SELECT 1 FROM seqpg_keys k
	WHERE k.key = $1 AND k.lease_token = $2 AND k.lease_until > clock_timestamp()
		AND NOT k.paused AND NOT k.halted)
ORDER BY j.lane, j.seq LIMIT 1
FOR UPDATE`

	// sqlComplete deletes the job and extends the lease, or, when it was
	// the key's last job, gives the key back; it returns the key's jobs
	// left. It raises seqpg_lease_lost() when the lease is no longer
	// ours (chain.go).
	sqlComplete = `
WITH k AS (
	UPDATE seqpg_keys SET pending = pending - 1,
		lease_owner = CASE WHEN pending > 1 THEN lease_owner END,
		lease_until = CASE WHEN pending > 1 THEN clock_timestamp() + $4 * interval '1 millisecond' ELSE '-infinity' END,
		run_after = CASE WHEN pending > 1 THEN clock_timestamp() + $4 * interval '1 millisecond' ELSE clock_timestamp() END
	WHERE key = $1 AND lease_token = $2 AND lease_until > clock_timestamp()
	RETURNING pending),
d AS (
	DELETE FROM seqpg_jobs WHERE id = $3 AND key = $1 AND EXISTS (SELECT 1 FROM k) RETURNING 1)
SELECT CASE WHEN EXISTS (SELECT 1 FROM d) THEN (SELECT pending FROM k) ELSE seqpg_lease_lost() END`

	// sqlFence locks the key's row if the lease is still ours; the
	// failure statements build on it.
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
	WHERE id = $3 AND key IN (SELECT key FROM k))
SELECT count(*) FROM k`

	sqlHalt = sqlFence + `,
r AS (
	UPDATE seqpg_keys SET lease_owner = NULL, lease_until = '-infinity', run_after = clock_timestamp(),
		halted = true, halt_error = $4
	WHERE key IN (SELECT key FROM k)),
j AS (
	UPDATE seqpg_jobs SET attempt = attempt + 1, started_at = coalesce(started_at, now()), last_error = $4
	WHERE id = $3 AND key IN (SELECT key FROM k))
SELECT count(*) FROM k`

	sqlDead = sqlFence + `,
d AS (
	DELETE FROM seqpg_jobs WHERE id = $3 AND key IN (SELECT key FROM k) RETURNING *),
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
		if stopping {
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
	tx, job := c.tx, c.job
	if tx == nil {
		var err error
		if tx, err = w.pool.Begin(ctx); err != nil {
			w.dbError(ctx, "begin", err)
			w.release(l)
			return
		}
		b := &pgx.Batch{}
		w.queueHead(b, l, &job)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			rollback(tx)
			w.dbError(ctx, "read job", err)
			w.release(l)
			return
		}
		if job == nil {
			rollback(tx)
			w.release(l)
			return
		}
	}
	// The transaction is rolled back when the step ends, unless finish
	// chained the key's next job's transaction onto it.
	chained := false
	defer func() {
		if !chained {
			tx.Rollback(context.WithoutCancel(ctx))
		}
	}()

	hctx := context.WithValue(ctx, fenceKey{}, Fence{Key: l.key, Token: l.token})
	hctx = context.WithValue(hctx, workerKey{}, w)
	returned := false
	var herr error
	defer func() {
		if !returned {
			if r := recover(); r != nil {
				herr = &seqsched.PanicError{Value: r, Stack: debug.Stack()}
			} else {
				herr = errGoexit
			}
			chained = w.finish(ctx, l, c.n, tx, job, herr)
		}
	}()
	herr = w.call(hctx, tx, job)
	returned = true
	if l.ctx.Err() != nil {
		w.expiredRunning(l, tx, job)
		return
	}
	chained = w.finish(ctx, l, c.n, tx, job, herr)
}

var errGoexit = fmt.Errorf("seqpg: handler called runtime.Goexit: %w", seqsched.ErrGoexit)

// call runs the handler through the interceptors.
func (w *Worker) call(ctx context.Context, tx pgx.Tx, job *Job) error {
	h := func(ctx context.Context, j *Job) error { return w.handler(ctx, tx, j) }
	return intercept.Chain(h, w.cfg.interceptors)(ctx, job)
}

// finish records the outcome of job's attempt and continues or ends l.
// tx has run ran jobs of its chain before job (chain.go); finish reports
// whether it chained the key's next job's transaction onto tx (then tx
// belongs to the lease, and must not be rolled back).
func (w *Worker) finish(ctx context.Context, l *lease, ran int, tx pgx.Tx, job *Job, herr error) (chained bool) {
	if herr == nil {
		return w.complete(ctx, l, ran, tx, job)
	}
	if tx != nil {
		tx.Rollback(context.WithoutCancel(ctx))
	}
	// The outcome is recorded even when ctx ended (Close gave up): a
	// failure is a fact, and the fence still guards it.
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.lease)
	defer cancel()
	terminal := errors.Is(herr, ErrTerminal)
	msg := herr.Error()
	var n int
	var err error
	switch {
	case !terminal && job.Attempt < w.cfg.attempts:
		d := w.backoff(octx, job, herr)
		err = w.pool.QueryRow(octx, sqlRetry, l.key, l.token, job.ID, msg, ms(d)).Scan(&n)
		if err == nil && n == 1 {
			w.n.retried.Add(1)
			w.log(slog.LevelWarn, "seqpg: job failed; retrying after backoff", "key", logkey.Cut(l.key),
				"job", job.ID, "attempt", job.Attempt, "backoff", d, "err", herr)
			w.drop(l) // the key is given back, ready after the backoff
			return false
		}
	case w.cfg.haltOnError:
		err = w.pool.QueryRow(octx, sqlHalt, l.key, l.token, job.ID, msg).Scan(&n)
		if err == nil && n == 1 {
			w.n.halted.Add(1)
			w.log(slog.LevelError, "seqpg: job failed; key halted until Resume or Discard", "key", logkey.Cut(l.key),
				"job", job.ID, "attempts", job.Attempt, "err", herr)
			w.drop(l)
			return false
		}
	default:
		sent := time.Now()
		err = w.pool.QueryRow(octx, sqlDead, l.key, l.token, job.ID, msg, ms(w.cfg.lease)).Scan(&n)
		if err == nil && n == 1 {
			l.renewed(sent, w.cfg.lease)
			w.n.deadLettered.Add(1)
			w.log(slog.LevelError, "seqpg: job failed; moved to seqpg_dead", "key", logkey.Cut(l.key),
				"job", job.ID, "attempts", job.Attempt, "err", herr)
			w.next(l)
			return false
		}
	}
	if err != nil {
		w.dbError(octx, "record failure", err)
		w.release(l)
		return false
	}
	w.lost(l, job)
	return false
}

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
