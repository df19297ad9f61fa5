package seqpg

// Leases: a worker holds a key by a row lock-free lease in seqpg_keys
// (lease_owner, lease_token, lease_until). claim takes free keys with work
// (FOR UPDATE SKIP LOCKED, so workers never wait for each other) and gives
// each a new token from seqpg_lease_token; renew extends the worker's
// leases every third of WithLease; every write that records a job's
// outcome (complete, retry, halt, dead-letter) first checks, under the
// key's row lock, that the lease is the worker's token and unexpired, so
// a worker that lost its lease can record nothing. Locally each lease has
// a timer that cancels its ctx (and its handler's) when the lease would
// have expired unrenewed.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

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
}

// renewed moves the lease's local expiry to a lease after sent, the time
// the statement that extended it was sent.
func (l *lease) renewed(sent time.Time, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil {
		l.timer.Reset(time.Until(sent.Add(d)))
	}
}

func (l *lease) end() {
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.mu.Unlock()
	l.stop()
}

const (
	sqlClaim = `
WITH c AS (
	SELECT key FROM seqpg_keys
	WHERE pending > 0 AND NOT paused AND NOT halted
		AND run_after <= clock_timestamp() AND lease_until < clock_timestamp()
	ORDER BY run_after LIMIT $2
	FOR UPDATE SKIP LOCKED)
UPDATE seqpg_keys k SET lease_owner = $1, lease_token = nextval('seqpg_lease_token'),
	lease_until = clock_timestamp() + $3 * interval '1 millisecond'
FROM c WHERE k.key = c.key
RETURNING k.key, k.lease_token`

	// sqlNextReady is how long until a key in backoff becomes ready.
	sqlNextReady = `
SELECT extract(epoch FROM min(run_after) - clock_timestamp()) FROM seqpg_keys
WHERE pending > 0 AND NOT paused AND NOT halted AND run_after > clock_timestamp()`

	sqlRenew = `
UPDATE seqpg_keys k SET lease_until = clock_timestamp() + $3 * interval '1 millisecond'
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
UPDATE seqpg_keys SET lease_owner = NULL, lease_until = '-infinity'
WHERE key = ANY($1) AND lease_token = ANY($2)`
)

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fetch is the fetcher's loop: claim keys while there is room, then wait
// for the doorbell (a NOTIFY, a key given back), a key's backoff to end,
// or the poll interval.
func (w *Worker) fetch(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-timer.C:
		}
		timer.Reset(w.claim(ctx))
	}
}

// claim takes up to the free capacity in keys and starts each on its
// session; it returns how long the fetcher may wait.
func (w *Worker) claim(ctx context.Context) time.Duration {
	w.mu.Lock()
	room := w.cfg.concurrency - len(w.leases)
	w.mu.Unlock()
	if room <= 0 {
		return w.cfg.pollInterval
	}
	sent := time.Now()
	rows, err := w.pool.Query(ctx, sqlClaim, w.owner, room, ms(w.cfg.lease))
	if err != nil {
		w.dbError(ctx, "claim", err)
		return w.cfg.pollInterval
	}
	var got []*lease
	for rows.Next() {
		l := &lease{}
		if err := rows.Scan(&l.key, &l.token); err != nil {
			rows.Close()
			break
		}
		got = append(got, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		// The claim may have committed: the leases it took expire.
		w.dbError(ctx, "claim", err)
		return w.cfg.pollInterval
	}
	for _, l := range got {
		w.start(l, sent)
	}
	w.n.claimed.Add(uint64(len(got)))
	if len(got) == room {
		return 0 // there may be more
	}
	var secs *float64
	if err := w.pool.QueryRow(ctx, sqlNextReady).Scan(&secs); err != nil {
		w.dbError(ctx, "claim", err)
		return w.cfg.pollInterval
	}
	if secs != nil {
		if d := time.Duration(*secs * float64(time.Second)); d < w.cfg.pollInterval {
			return max(d, time.Millisecond)
		}
	}
	return w.cfg.pollInterval
}

// start registers a claimed lease and posts its key's first step.
func (w *Worker) start(l *lease, sent time.Time) {
	l.ctx, l.stop = context.WithCancel(context.Background())
	l.timer = time.AfterFunc(time.Until(sent.Add(w.cfg.lease)), l.stop)
	w.mu.Lock()
	if old := w.leases[l.key]; old != nil {
		// Our earlier lease of the key expired and the key came back to
		// us: the old chain stops at its next step (its ctx is done).
		old.end()
	}
	w.leases[l.key] = l
	w.mu.Unlock()
	if err := w.sched.Post(context.Background(), l.key, w.step(l)); err != nil {
		w.release(l)
	}
}

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

// release gives l's key back when it has no job ready for us, and drops
// it locally.
func (w *Worker) release(l *lease) {
	defer w.drop(l)
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.lease)
	defer cancel()
	var again bool
	err := w.pool.QueryRow(ctx, sqlRelease, l.key, l.token).Scan(&again)
	if err != nil && !errors.Is(err, errNoRows) {
		w.dbError(ctx, "release", err) // the lease expires
	}
	if again {
		w.poke()
	}
}

// releaseAll gives back every key still held, at the end of Run.
func (w *Worker) releaseAll() {
	w.mu.Lock()
	var keys []string
	var tokens []int64
	for _, l := range w.leases {
		keys = append(keys, l.key)
		tokens = append(tokens, l.token)
		l.end()
	}
	clear(w.leases)
	w.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.lease)
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

// listen keeps a connection LISTENing and rings the doorbell on each
// notification, and once after each (re)connection, for what it missed.
func (w *Worker) listen(ctx context.Context) {
	for ctx.Err() == nil {
		w.listenOnce(ctx)
		w.poke()
		select {
		case <-ctx.Done():
		case <-time.After(w.cfg.pollInterval):
		}
	}
}

func (w *Worker) listenOnce(ctx context.Context) {
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		w.dbError(ctx, "listen", err)
		return
	}
	// The connection ends with the loop: a LISTENing connection must not
	// go back to the pool.
	defer func() {
		c := conn.Hijack()
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		w.dbError(ctx, "listen", err)
		return
	}
	w.poke()
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			w.dbError(ctx, "listen", err)
			return
		}
		w.poke()
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
