package seqpg

// Leases: a worker holds a key by a lease (not a row lock) in seqpg_keys
// (lease_owner, lease_token, lease_until). claim takes free keys with work
// (FOR UPDATE SKIP LOCKED, so workers never wait for each other) and gives
// each a new token from seqpg_lease_token; renew extends the worker's
// leases every third of WithLease; every write that records a job's
// outcome (complete, retry, halt, dead-letter) first checks, under the
// key's row lock, that the lease is the worker's token and unexpired, so
// a worker that lost its lease can record nothing. Locally each lease has
// a timer that cancels its ctx (and its handler's) when the lease would
// have expired unrenewed.
//
// A held key's run_after moves with its lease_until, so that the claim's
// scan of the ready index (ordered by run_after) stops at the first key
// not yet claimable: a claim reads the keys it takes, not every key
// with work (the held ones were most of them).

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seqsched/seqsched/internal/logkey"
)

// lease is the worker's hold on one key.
type lease struct {
	key   string
	token int64
	ctx   context.Context // canceled when the lease is lost or given up
	stop  context.CancelFunc

	mu    sync.Mutex
	timer *time.Timer
	until time.Time  // the local expiry, on the monotonic clock
	b     batchState // WithBatchedCompletion's jobs in hand
	c     chain      // the transaction the key's next job waits in (chain.go)
}

// renewed moves the lease's local expiry to a lease after sent, the time
// the statement that extended it was sent.
func (l *lease) renewed(sent time.Time, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil {
		l.until = sent.Add(d)
		l.timer.Reset(time.Until(l.until))
	}
}

// live reports whether the lease is still held locally: its ctx is not
// done and its expiry has not passed. The clock is read as well as the
// timer, because a process thawed after a freeze may run a step before
// the timer's callback has run.
func (l *lease) live() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctx.Err() == nil && time.Now().Before(l.until)
}

// end stops l's timer and ctx, and rolls back the transaction its key's
// next job waits in, if any. It does a round trip: call it with no lock
// of the worker held.
func (l *lease) end() {
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.mu.Unlock()
	l.stop()
	l.closeChain()
}

const (
	sqlRenew = `
UPDATE seqpg_keys k SET lease_until = clock_timestamp() + $3 * interval '1 millisecond',
	run_after = clock_timestamp() + $3 * interval '1 millisecond'
FROM (
	SELECT key FROM seqpg_keys
	WHERE key = ANY($1) AND lease_token = ANY($2) AND lease_until > clock_timestamp()
	FOR UPDATE SKIP LOCKED) c
WHERE k.key = c.key
RETURNING k.key`

	// sqlRelease gives an idle key back, and says whether work arrived
	// meanwhile (an enqueue that committed after the key was found empty).
	sqlRelease = `
UPDATE seqpg_keys SET lease_owner = NULL, lease_until = '-infinity', run_after = clock_timestamp()
WHERE key = $1 AND lease_token = $2
RETURNING pending > 0 AND NOT paused AND NOT halted`

	sqlReleaseAll = `
UPDATE seqpg_keys SET lease_owner = NULL, lease_until = '-infinity', run_after = clock_timestamp()
WHERE key = ANY($1) AND lease_token = ANY($2)`
)

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// drop forgets l locally and rings the doorbell: there is room.
func (w *Worker) drop(l *lease) {
	l.end()
	w.mu.Lock()
	if w.leases[l.key] == l {
		delete(w.leases, l.key)
	}
	w.mu.Unlock()
	w.poke()
}

// expired gives l's key back: l was found expired locally (its timer
// fired, or its expiry passed) before a renewal came back. The release is
// fenced by l's token alone, so unless another worker has taken the key
// since, the key is free at once, for any worker, instead of waiting up
// to one WithLease for its lease to run out in the database (the
// database may hold it longer than this worker knows: a renewal that took
// effect but whose reply was lost). It is logged at Warn and counted. A
// lease the worker had already ended (dropped, released, or replaced by
// a new claim of the key) is dropped again quietly.
func (w *Worker) expired(l *lease, why string) {
	w.mu.Lock()
	held := w.leases[l.key] == l
	w.mu.Unlock()
	if !held {
		w.drop(l)
		return
	}
	w.n.leaseExpired.Add(1)
	w.log(slog.LevelWarn, "seqpg: lease expired locally; the key is given back",
		"key", logkey.Cut(l.key), "token", l.token, "why", why)
	w.release(l)
}

// expiredRunning rolls back tx, the transaction of job, whose handler
// returned after l expired locally (the handler's ctx was canceled by
// it): its outcome cannot be recorded, since the lease may be another
// worker's by now, and the job runs again under the key's next lease. It
// is logged at Warn and counted, and the key given back as expired does.
func (w *Worker) expiredRunning(l *lease, tx pgx.Tx, job *Job) {
	rollback(tx)
	w.n.leaseExpiredRunning.Add(1)
	w.log(slog.LevelWarn, "seqpg: lease expired locally while its job ran; the job's transaction was rolled back",
		"key", logkey.Cut(l.key), "token", l.token, "job", job.ID,
		"why", "the lease expired unrenewed while the handler ran")
	w.release(l)
}

// release gives l's key back when it has no job ready for us, and drops
// it locally.
func (w *Worker) release(l *lease) {
	defer w.drop(l)
	// The key's open group commits first, and its next job, locked in
	// the group's transaction, is let go: the worker that takes the key
	// next must not wait for it.
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.lease)
	defer cancel()
	w.settleChain(ctx, l)
	w.flushOnRelease(ctx, l)
	var again bool
	err := w.pool.QueryRow(ctx, sqlRelease, l.key, l.token).Scan(&again)
	if err != nil && !errors.Is(err, errNoRows) {
		w.dbError(ctx, "release", err) // the lease expires
	}
	if again {
		w.poke()
	}
}

// releaseAll gives back every key still held, at the end of Run, with
// what its open group or batch completed.
func (w *Worker) releaseAll() {
	w.mu.Lock()
	open := make([]*lease, 0, len(w.leases))
	for _, l := range w.leases {
		open = append(open, l)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.lease)
	for _, l := range open {
		w.settleChain(ctx, l)
		w.flushOnRelease(ctx, l)
	}
	cancel()
	w.mu.Lock()
	var keys []string
	var tokens []int64
	var held []*lease
	for _, l := range w.leases {
		keys = append(keys, l.key)
		tokens = append(tokens, l.token)
		held = append(held, l)
	}
	clear(w.leases)
	w.mu.Unlock()
	for _, l := range held {
		l.end()
	}
	if len(keys) == 0 {
		return
	}
	ctx, cancel = context.WithTimeout(context.Background(), w.cfg.lease)
	defer cancel()
	if _, err := w.pool.Exec(ctx, sqlReleaseAll, keys, tokens); err != nil {
		w.dbError(ctx, "release", err)
		return
	}
	w.pool.Exec(ctx, `SELECT pg_notify($1, '')`, notifyChannel)
}

// renew extends the worker's leases every third of a lease. A key whose
// row another transaction has locked (an enqueue in progress) is skipped
// this round rather than waited for, so that one key never delays the
// renewal of the others.
func (w *Worker) renew(ctx context.Context) {
	t := time.NewTicker(w.cfg.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		byKey := make(map[string]*lease, len(w.leases))
		keys := make([]string, 0, len(w.leases))
		tokens := make([]int64, 0, len(w.leases))
		for k, l := range w.leases {
			byKey[k] = l
			keys = append(keys, k)
			tokens = append(tokens, l.token)
		}
		w.mu.Unlock()
		if len(keys) == 0 {
			continue
		}
		sent := time.Now()
		rows, err := w.pool.Query(ctx, sqlRenew, keys, tokens, ms(w.cfg.lease))
		if err != nil {
			w.dbError(ctx, "renew", err)
			continue
		}
		for rows.Next() {
			var k string
			if rows.Scan(&k) == nil && byKey[k] != nil {
				byKey[k].renewed(sent, w.cfg.lease)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			w.dbError(ctx, "renew", err)
		}
	}
}

// dbError logs a database error at Warn, unless ctx ended (the worker is
// stopping).
func (w *Worker) dbError(ctx context.Context, op string, err error) {
	if ctx.Err() != nil {
		return
	}
	w.n.errs.Add(1)
	w.log(slog.LevelWarn, "seqpg: "+op+" failed; retrying", "err", err)
}

// lost records that l's lease was found lost, and drops it.
func (w *Worker) lost(l *lease, job *Job) {
	w.n.leaseLost.Add(1)
	w.log(slog.LevelWarn, "seqpg: lease lost; the job's transaction was rolled back",
		"key", logkey.Cut(l.key), "token", l.token, "job", job.ID, "err", ErrLeaseLost)
	w.drop(l)
}
