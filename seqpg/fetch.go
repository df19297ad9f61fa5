package seqpg

// Finding work: the fetcher claims keys while the worker has room, woken
// by the listener (a NOTIFY from an enqueue to a key no worker holds), by
// a key given back, by the end of a key's backoff, or by the poll
// interval. Each claimed key starts as a chain of steps on its seqsched
// session (run.go).

import (
	"context"
	"time"

	"github.com/seqsched/seqsched/internal/pgclaim"
)

const (
	sqlClaim = pgclaim.SQL // shared with seqpg/bench's stall diagnosis

	// sqlNextReady is how long until a key becomes claimable: its backoff
	// ends, or its lease expires unrenewed.
	sqlNextReady = `
SELECT extract(epoch FROM min(run_after) - clock_timestamp()) FROM seqpg_keys
WHERE pending > 0 AND NOT paused AND NOT halted AND run_after > clock_timestamp()`
)

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
	// The claim is not canceled with the fetcher: a claim that committed
	// while Run stopped would leave its keys held by no one until their
	// leases expired. Its leases are started as usual, and the first step
	// of each gives its key back at once when the worker is stopping.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.lease)
	defer cancel()
	rows, err := w.pool.Query(qctx, sqlClaim, w.owner, room, ms(w.cfg.lease))
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
		// Lost with the connection: if the claim committed, the leases it
		// took expire.
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
	l.until = sent.Add(w.cfg.lease)
	l.timer = time.AfterFunc(time.Until(l.until), l.stop)
	w.mu.Lock()
	old := w.leases[l.key]
	w.leases[l.key] = l
	w.mu.Unlock()
	if old != nil {
		// Our earlier lease of the key expired and the key came back to
		// us: the old chain stops at its next step (its ctx is done).
		old.end()
	}
	if err := w.sched.Post(context.Background(), l.key, w.step(l)); err != nil {
		w.release(l)
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
