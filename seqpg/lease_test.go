package seqpg_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A worker whose lease expired while its handler ran can neither complete
// the job nor record its failure: its transaction is rolled back, and the
// worker that took the key over runs the job, with a larger token, and
// its effect is applied once.
func TestLostLeaseCannotComplete(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE effects (job bigint PRIMARY KEY, token bigint)`)
	require.NoError(t, err)

	started, release := make(chan seqpg.Fence, 1), make(chan struct{})
	effect := func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		f, ok := seqpg.LeaseOf(ctx)
		if !ok || f.Key != job.Key {
			t.Errorf("LeaseOf = %v, %v", f, ok)
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, job.ID, f.Token)
		return err
	}
	a := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		if err := effect(ctx, tx, job); err != nil {
			return err
		}
		f, _ := seqpg.LeaseOf(ctx)
		started <- f
		waitOrDone(ctx, release) // frozen past its lease
		return nil
	}, seqpg.WithMaxConcurrency(1)) // A has no room to claim the key back itself: B takes it
	e := enqueue(t, pool, "k", "x")
	fa := recv(t, started, "A to start the job")

	// The lease expires (as if A were frozen past it); A's renewals are
	// refused from now on.
	_, err = pool.Exec(ctx, `UPDATE seqpg_keys SET lease_until = now() - interval '1 second', run_after = now() - interval '1 second' WHERE key = 'k'`)
	require.NoError(t, err)
	tokens := make(chan int64, 1)
	b := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		f, _ := seqpg.LeaseOf(ctx)
		tokens <- f.Token
		return effect(ctx, tx, job)
	})
	// B has claimed the key (a new token); it waits for A's row lock.
	eventually(t, "B to claim the key", func() bool { return b.Stats().Claimed == 1 })
	close(release)

	fb := recv(t, tokens, "B to run the job (a lease-lost A must not have completed it)")
	assert.Greater(t, fb, fa.Token)
	eventually(t, "the job to complete", func() bool { return state(t, pool, "k").Pending == 0 })
	// A's refused completion aborted its transaction, which let B go on,
	// before A counted it.
	eventually(t, "A to count its lost lease", func() bool { return a.Stats().LeaseLost == 1 })
	eventually(t, "B to count its completion", func() bool { return b.Stats().Completed == 1 })
	assert.Equal(t, uint64(0), a.Stats().Completed)
	var token int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM effects WHERE job = $1`, e.ID).Scan(&token))
	assert.Equal(t, fb, token, "the effect is B's, once")
}

// A lease lost by a handler that fails cannot record the failure either:
// the next run of the job is still its first attempt, and nothing went to
// the dead-letter table.
func TestLostLeaseCannotFail(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	started, release := make(chan struct{}, 1), make(chan struct{})
	attempts := make(chan int, 2)
	a := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		attempts <- job.Attempt
		if len(attempts) == 1 {
			started <- struct{}{}
			waitOrDone(ctx, release)
			return seqpg.Terminal(assert.AnError)
		}
		return nil
	}, seqpg.WithMaxConcurrency(1)) // no room to claim the key again while the first attempt runs
	enqueue(t, pool, "k", "x")
	<-started
	_, err := pool.Exec(ctx, `UPDATE seqpg_keys SET lease_until = now() - interval '1 second', run_after = now() - interval '1 second' WHERE key = 'k'`)
	require.NoError(t, err)
	close(release)
	eventually(t, "the job to complete", func() bool { return state(t, pool, "k").Pending == 0 })
	// A rolled back before it tried to record the failure: the job may
	// complete before A counts the refusal.
	eventually(t, "A to count its lost lease", func() bool { return a.Stats().LeaseLost == 1 })
	assert.Equal(t, 1, <-attempts)
	assert.Equal(t, 1, <-attempts, "the lost failure was not recorded")
	var dead int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM seqpg_dead`).Scan(&dead))
	assert.Equal(t, 0, dead)
}

// holdKey moves the end of token's lease on key an hour ahead, committed
// (the database holds the lease far longer than the worker knows: a
// renewal that took effect, whose reply was lost), then locks the key's
// row in a transaction it returns, so that renewals skip the key until
// it ends. A renewal that came between the two shortened the lease again:
// then it starts over. A handler of the lease calls it, well within the
// lease, so that the lease is still token's.
func holdKey(pool *pgxpool.Pool, key string, token int64) (pgx.Tx, error) {
	ctx := context.Background()
	for {
		tag, err := pool.Exec(ctx, `UPDATE seqpg_keys SET lease_until = now() + interval '1 hour',
			run_after = now() + interval '1 hour' WHERE key = $1 AND lease_token = $2 AND lease_until > now()`, key, token)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("lease %d of %q not held when its handler ran", token, key)
		}
		if err != nil {
			return nil, err
		}
		lock, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		var long bool
		err = lock.QueryRow(ctx, `SELECT lease_until > now() + interval '30 minutes' FROM seqpg_keys
			WHERE key = $1 FOR UPDATE`, key).Scan(&long)
		if err == nil && long {
			return lock, nil
		}
		lock.Rollback(ctx)
		if err != nil {
			return nil, err
		}
	}
}

// held is what a handler that called holdKey hands the test.
type held struct {
	token int64
	lock  pgx.Tx
	err   error
}

// hold calls holdKey for the handler call whose ctx is ctx and sends the
// result on ch.
func hold(ctx context.Context, pool *pgxpool.Pool, ch chan<- held) {
	f, _ := seqpg.LeaseOf(ctx)
	lock, err := holdKey(pool, f.Key, f.Token)
	ch <- held{f.Token, lock, err}
}

// A key whose lease expires locally between its steps, while the
// database still holds it, is given back at once rather than left to
// wait for its lease to run out there (an hour here): its next job runs
// within seconds. It is logged at Warn, with the key, the token and why,
// and counted in Stats.LeaseExpired.
func TestExpiredLeaseIsGivenBack(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	logs := &records{}
	holds := make(chan held, 1)
	var calls atomic.Int32
	r := newRecorder()
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if calls.Add(1) == 1 {
			hold(ctx, pool, holds)
			<-ctx.Done() // the lease expired locally
		}
		return nil // a success whose next step comes after the lease
	}, seqpg.WithBatchedCompletion(10), seqpg.WithLease(3*time.Second), seqpg.WithLogger(slog.New(logs)))
	enqueue(t, pool, "k", "x")
	enqueue(t, pool, "k", "y")
	h := <-holds
	require.NoError(t, h.err)
	defer h.lock.Rollback(ctx)

	eventually(t, "the expired lease to be counted", func() bool { return w.Stats().LeaseExpired == 1 })
	require.NoError(t, h.lock.Commit(ctx))
	released := time.Now()
	assert.Equal(t, []string{"x", "y"}, r.wait(t, 2))
	assert.Less(t, time.Since(released), 5*time.Second, "the key waited for its lease in the database")
	eventually(t, "the jobs to complete", func() bool { return state(t, pool, "k").Pending == 0 })
	assert.Equal(t, uint64(1), w.Stats().LeaseExpired)
	assert.Equal(t, uint64(0), w.Stats().LeaseLost, "x's completion was recorded: the database still held the lease")
	assert.Equal(t, uint64(2), w.Stats().Claimed)
	got := logs.find("seqpg: lease expired locally; the key is given back")
	require.Len(t, got, 1)
	assert.Equal(t, slog.LevelWarn, got[0].level)
	assert.Equal(t, "k", got[0].attrs["key"])
	assert.Equal(t, h.token, got[0].attrs["token"])
	assert.Equal(t, "the lease expired unrenewed before the key's next step", got[0].attrs["why"])
}

// A job whose lease expires locally while its handler runs (default
// mode) is not silently lost: its transaction is rolled back, which is
// logged at Warn with the key, the token, the job and why, and counted in
// Stats.LeaseExpiredRunning; the key is given back at once, and the job
// runs again, its effect applied once.
func TestLeaseExpiredWhileRunningIsRolledBackVisibly(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE effects (job bigint PRIMARY KEY, token bigint)`)
	require.NoError(t, err)
	logs := &records{}
	holds := make(chan held, 1)
	tokens := make(chan int64, 2)
	var calls atomic.Int32
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		f, _ := seqpg.LeaseOf(ctx)
		tokens <- f.Token
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, job.ID, f.Token); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			hold(ctx, pool, holds)
			<-ctx.Done() // the lease expired locally
		}
		return nil
	}, seqpg.WithLease(3*time.Second), seqpg.WithLogger(slog.New(logs)))
	e := enqueue(t, pool, "k", "x")
	first := <-tokens
	h := <-holds
	require.NoError(t, h.err)
	defer h.lock.Rollback(ctx)

	eventually(t, "the rolled-back job to be counted", func() bool { return w.Stats().LeaseExpiredRunning == 1 })
	require.NoError(t, h.lock.Commit(ctx))
	released := time.Now()
	var second int64
	select {
	case second = <-tokens:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not run again within 10s: its key waited for its lease in the database")
	}
	assert.Less(t, time.Since(released), 5*time.Second)
	assert.Greater(t, second, first)
	eventually(t, "the job to complete", func() bool { return state(t, pool, "k").Pending == 0 })
	eventually(t, "the completion to be counted", func() bool { return w.Stats().Completed == 1 })
	var token int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM effects WHERE job = $1`, e.ID).Scan(&token))
	assert.Equal(t, second, token, "the effect is the second run's, once")
	s := w.Stats()
	assert.Equal(t, uint64(1), s.LeaseExpiredRunning)
	assert.Equal(t, uint64(1), s.Completed)
	assert.Equal(t, uint64(0), s.Retried, "an expired lease is not a failed attempt")
	got := logs.find("seqpg: lease expired locally while its job ran; the job's transaction was rolled back")
	require.Len(t, got, 1)
	assert.Equal(t, slog.LevelWarn, got[0].level)
	assert.Equal(t, "k", got[0].attrs["key"])
	assert.Equal(t, first, got[0].attrs["token"])
	assert.Equal(t, e.ID, got[0].attrs["job"])
	assert.Equal(t, "the lease expired unrenewed while the handler ran", got[0].attrs["why"])
}

// records is a slog handler that keeps every record.
type records struct {
	mu  sync.Mutex
	all []record
}

type record struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	attrs := map[string]any{}
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.Any()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, record{rec.Level, rec.Message, attrs})
	return nil
}

// find returns the records with message msg.
func (r *records) find(msg string) []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []record
	for _, rec := range r.all {
		if rec.msg == msg {
			out = append(out, rec)
		}
	}
	return out
}

// A worker that lost its lease with a group of its key's jobs open
// commits none of them: the group's completions roll back with their
// effects, and the worker that took the key over runs every job of the
// group again, each effect applied once, with its token.
func TestLostLeaseRollsBackTheWholeGroup(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE effects (payload text PRIMARY KEY, token bigint)`)
	require.NoError(t, err)
	effect := func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		f, _ := seqpg.LeaseOf(ctx)
		_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2)`, string(job.Payload), f.Token)
		return err
	}
	second, release := make(chan struct{}), make(chan struct{})
	a := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		if err := effect(ctx, tx, job); err != nil {
			return err
		}
		if string(job.Payload) == "2" {
			close(second)
			waitOrDone(ctx, release) // frozen past its lease
		}
		return nil
	}, seqpg.WithMaxConcurrency(1), seqpg.WithGroupCommit(16, time.Hour))
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, p := range []string{"1", "2"} {
			if _, err := seqpg.Enqueue(ctx, tx, "k", []byte(p)); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	<-second // job 1 is done in A's open group

	_, err = pool.Exec(ctx, `UPDATE seqpg_keys SET lease_until = now() - interval '1 second', run_after = now() - interval '1 second' WHERE key = 'k'`)
	require.NoError(t, err)
	r := newRecorder()
	b := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		return effect(ctx, tx, job)
	})
	eventually(t, "B to claim the key", func() bool { return b.Stats().Claimed == 1 })
	close(release)

	assert.Equal(t, []string{"1", "2"}, r.wait(t, 2), "B runs the whole group again")
	eventually(t, "the key to end", func() bool { return state(t, pool, "k").Pending == 0 })
	eventually(t, "A to count its lost lease", func() bool { return a.Stats().LeaseLost == 1 })
	// B counts its completions after its commit returns, which the
	// database shows first.
	eventually(t, "B to count its completions", func() bool { return b.Stats().Completed == 2 })
	assert.Equal(t, uint64(0), a.Stats().Completed)
	rows, err := pool.Query(ctx, `SELECT token FROM effects ORDER BY payload`)
	require.NoError(t, err)
	tokens, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, tokens, 2)
	assert.Equal(t, tokens[0], tokens[1], "both effects are B's, once each")
}

// Two claims at once never take the same key: a claim takes the oldest
// ready keys up to its room, the second skips those the first has locked
// (without waiting for it), each lease gets a new, larger token, and a
// claim after both finds every key leased.
func TestConcurrentClaimsTakeDisjointKeysOldestFirst(t *testing.T) {
	pool, _ := newDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys := []string{"a", "b", "c", "d"}
	for _, k := range keys {
		enqueue(t, pool, k, "x")
	}
	// a is the oldest ready key, d the newest.
	_, err := pool.Exec(ctx, `UPDATE seqpg_keys SET run_after = clock_timestamp() - (ascii('e') - ascii(key)) * interval '1 minute'`)
	require.NoError(t, err)
	claim := func(tx pgx.Tx, owner string, room int) (got []string, tokens []int64) {
		t.Helper()
		rows, err := tx.Query(ctx, seqpg.SQLClaim, owner, room, 60000.0)
		require.NoError(t, err)
		for rows.Next() {
			var k string
			var token int64
			require.NoError(t, rows.Scan(&k, &token))
			got = append(got, k)
			tokens = append(tokens, token)
		}
		require.NoError(t, rows.Err())
		slices.Sort(got)
		return got, tokens
	}

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx)
	got1, tokens1 := claim(first, "one", 2)
	require.Equal(t, []string{"a", "b"}, got1, "the first claim, room 2")

	// The first claim's transaction is still open: its keys are locked.
	second, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer second.Rollback(ctx)
	got2, tokens2 := claim(second, "two", 10)
	require.Equal(t, []string{"c", "d"}, got2, "the second claim, room 10, while the first is open")
	require.NoError(t, second.Commit(ctx))
	require.NoError(t, first.Commit(ctx))
	for _, t2 := range tokens2 {
		for _, t1 := range tokens1 {
			require.Greater(t, t2, t1, "tokens: first %v, second %v", tokens1, tokens2)
		}
	}

	third, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer third.Rollback(ctx)
	got3, _ := claim(third, "three", 10)
	require.Empty(t, got3, "a claim while every key is leased")

	owners := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT key, lease_owner FROM seqpg_keys`)
	require.NoError(t, err)
	for rows.Next() {
		var k, o string
		require.NoError(t, rows.Scan(&k, &o))
		owners[k] = o
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]string{"a": "one", "b": "one", "c": "two", "d": "two"}, owners)
}
