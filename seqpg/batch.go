package seqpg

// Batched completion (WithBatchedCompletion): a key's jobs are read n at
// a time and run one per step, as in run.go, but without a transaction;
// the completions of the jobs run since the last read are recorded in one
// statement, sent in the same round trip (one implicit transaction) as
// the next read. Both statements are fenced like every outcome: a lost
// lease completes nothing and reads nothing. The read marks its jobs
// started, so that Replace leaves them alone: a job in hand is never
// rewritten under its worker, whose completion deletes it by id. The
// completion of a key's last jobs gives the key back itself, and the
// first read of a lease goes alone, so a key of n jobs or fewer costs
// two round trips besides its share of a claim: the read, and the
// completions with the read that finds the key given back.
//
// The fetched and done lists of a lease are touched by its key's steps,
// which run one at a time on the key's session, and by release after the
// last of them; the lease's mutex orders the two.

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/internal/logkey"
)

const (
	// sqlCompleteBatch deletes the jobs run since the last read, if the
	// lease is still ours, and extends the lease, or, when they were the
	// key's last, gives the key back, as a group's settle does
	// (chain.go): the read sent after it then finds the lease gone, and
	// the key costs no release of its own. It returns whether the lease
	// was ours and, if it was, the key's jobs left.
	sqlCompleteBatch = sqlFence + `,
d AS (
	DELETE FROM seqpg_jobs WHERE id = ANY($3) AND EXISTS (SELECT 1 FROM k) RETURNING 1),
u AS (
	UPDATE seqpg_keys SET pending = pending - (SELECT count(*) FROM d),
		lease_owner = CASE WHEN pending > (SELECT count(*) FROM d) THEN lease_owner END,
		lease_until = CASE WHEN pending > (SELECT count(*) FROM d)
			THEN clock_timestamp() + $4 * interval '1 millisecond' ELSE '-infinity' END,
		run_after = CASE WHEN pending > (SELECT count(*) FROM d)
			THEN clock_timestamp() + $4 * interval '1 millisecond' ELSE clock_timestamp() END
	WHERE key IN (SELECT key FROM k)
	RETURNING pending)
SELECT EXISTS (SELECT 1 FROM k), coalesce((SELECT pending FROM u), 0)`

	// sqlFetch reads and marks started the key's next jobs, if the lease
	// is still ours and the key is neither paused nor halted. RETURNING
	// has no order: the caller sorts.
	//
	// The jobs are chosen once, by an ARRAY sub-select (an init plan),
	// and updated by their ids. As "id IN (sub-select)" it was a join
	// that the planner may turn inside out: once an ANALYZE has found
	// seqpg_jobs empty (autovacuum's, after a queue drained), it takes
	// the table for one row and scans the whole of it, running the
	// sub-select again for each row, so that each fetch cost the square
	// of the queue's depth (issue 48's stall: 300 jobs/s).
	sqlFetch = `
UPDATE seqpg_jobs SET started_at = coalesce(started_at, now())
WHERE id = ANY (ARRAY(
	SELECT j.id FROM seqpg_jobs j
	WHERE j.key = $1 AND EXISTS (
		SELECT 1 FROM seqpg_keys k
		WHERE k.key = $1 AND k.lease_token = $2 AND k.lease_until > clock_timestamp()
			AND NOT k.paused AND NOT k.halted)
	ORDER BY j.lane, j.seq LIMIT $3
	FOR UPDATE))
RETURNING id, lane, seq, kind, payload, coalesce(tag, ''), attempt, enqueued_at`
)

// batchState is a lease's jobs in hand under WithBatchedCompletion.
type batchState struct {
	fetched []*Job  // read, not yet run, in order
	done    []int64 // run, completion not yet recorded
}

// runBatched runs the key's next job in hand, reading the next ones
// (and recording the completions so far) when none is left.
func (w *Worker) runBatched(ctx context.Context, l *lease) {
	l.mu.Lock()
	empty := len(l.b.fetched) == 0
	l.mu.Unlock()
	if empty {
		ok, gone, err := w.flush(ctx, l, true)
		switch {
		case err != nil:
			w.dbError(ctx, "read jobs", err)
			w.release(l)
			return
		case !ok:
			w.lostBatch(l)
			return
		case gone:
			w.drop(l) // the completions gave the key back
			return
		}
		l.mu.Lock()
		empty = len(l.b.fetched) == 0
		l.mu.Unlock()
		if empty {
			w.release(l)
			return
		}
	}
	// The jobs in hand were read under the lease; each runs only while
	// it is still held (the read of the next ones is fenced in the
	// database).
	if !l.live() {
		w.expired(l, "the lease expired unrenewed with jobs in hand; they run again under the key's next lease")
		return
	}
	l.mu.Lock()
	job := l.b.fetched[0]
	l.b.fetched = l.b.fetched[1:]
	l.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopOnLoss := context.AfterFunc(l.ctx, cancel)
	defer stopOnLoss()
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
			w.finishBatched(ctx, l, job, herr)
		}
	}()
	herr = w.call(hctx, nil, job)
	returned = true
	w.finishBatched(ctx, l, job, herr)
}

// finishBatched records a success in the lease's done list and continues
// the key; a failure first records the completions before it, then goes
// the way of run.go's failures, with the jobs in hand dropped (they are
// read again after it).
func (w *Worker) finishBatched(ctx context.Context, l *lease, job *Job, herr error) {
	if herr == nil {
		l.mu.Lock()
		l.b.done = append(l.b.done, job.ID)
		l.mu.Unlock()
		w.next(l)
		return
	}
	l.mu.Lock()
	l.b.fetched = nil
	l.mu.Unlock()
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.lease)
	defer cancel()
	ok, _, err := w.flush(octx, l, false) // the failed job is left: the key stays ours
	switch {
	case err != nil:
		w.dbError(octx, "complete", err)
		w.release(l)
		return
	case !ok:
		w.lostBatch(l)
		return
	}
	w.fail(ctx, l, job, herr, nil)
}

// flush records the completions of the jobs run since the last read and,
// with read, reads the key's next jobs into the lease, in one round trip.
// ok is false when the lease was found lost: nothing was recorded. gone
// is true when the completions were the key's last jobs and gave the key
// back. With no completion to record, the read goes alone: it is fenced
// itself, and the lease was taken or extended by the statement before.
func (w *Worker) flush(ctx context.Context, l *lease, read bool) (ok, gone bool, err error) {
	l.mu.Lock()
	done := l.b.done
	l.mu.Unlock()
	if len(done) == 0 && !read {
		return true, false, nil
	}
	sent := time.Now()
	b := &pgx.Batch{}
	ours := true
	var left int64
	if len(done) > 0 {
		b.Queue(sqlCompleteBatch, l.key, l.token, done, ms(w.cfg.lease)).QueryRow(func(r pgx.Row) error {
			return r.Scan(&ours, &left)
		})
	}
	var jobs []*Job
	if read {
		b.Queue(sqlFetch, l.key, l.token, w.cfg.batch).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				job, err := scanJob(rows, l.key)
				if err != nil {
					return err
				}
				jobs = append(jobs, job)
			}
			return rows.Err()
		})
	}
	if err := w.pool.SendBatch(ctx, b).Close(); err != nil {
		return false, false, err
	}
	if !ours {
		return false, false, nil
	}
	slices.SortFunc(jobs, func(a, b *Job) int {
		if a.High != b.High {
			if a.High {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	if len(done) > 0 {
		l.renewed(sent, w.cfg.lease)
	}
	l.mu.Lock()
	l.b.done = l.b.done[len(done):]
	l.b.fetched = jobs
	l.mu.Unlock()
	w.n.completed.Add(uint64(len(done)))
	return true, len(done) > 0 && left == 0, nil
}

// lostBatch drops a lease found lost with completions unrecorded: those
// jobs run again under the key's next lease.
func (w *Worker) lostBatch(l *lease) {
	w.n.leaseLost.Add(1)
	w.log(slog.LevelWarn, "seqpg: lease lost; the completions not yet recorded were not",
		"key", logkey.Cut(l.key), "token", l.token, "err", ErrLeaseLost)
	w.drop(l)
}

// flushOnRelease records what l's key completed before the key is given
// back; a failure is logged, and those jobs run again.
func (w *Worker) flushOnRelease(ctx context.Context, l *lease) {
	if w.cfg.batch == 0 {
		return
	}
	ok, _, err := w.flush(ctx, l, false)
	if err != nil && !errors.Is(err, context.Canceled) {
		w.dbError(ctx, "complete", err)
	} else if err == nil && !ok {
		w.n.leaseLost.Add(1)
		w.log(slog.LevelWarn, "seqpg: lease lost; the completions not yet recorded were not",
			"key", logkey.Cut(l.key), "token", l.token, "err", ErrLeaseLost)
	}
}
