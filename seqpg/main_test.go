package seqpg_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/seqsched/seqsched/internal/pgtest"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/require"
)

// TestMain starts the PostgreSQL server the package's tests share
// (pgtest.Shared; each test gets its own database on it), unless the
// binary runs as one of the property test's worker processes.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain())
	}
	pgtest.Main(m)
}

// newDB returns a pool on a fresh, migrated database; it is closed when
// the test ends.
func newDB(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.Shared(t).CreateDB(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, seqpg.Migrate(ctx, pool))
	return pool, dsn
}

// enqueue adds one job in its own transaction.
func enqueue(t testing.TB, pool *pgxpool.Pool, key, payload string, opts ...seqpg.JobOption) seqpg.Enqueued {
	t.Helper()
	var e seqpg.Enqueued
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		var err error
		e, err = seqpg.Enqueue(context.Background(), tx, key, []byte(payload), opts...)
		return err
	})
	require.NoError(t, err)
	return e
}

// testOpts are the options tests run workers with: short polls and
// backoffs, so that what waits for them waits briefly, and a lease long
// enough that a handler a test holds is never idle past it in its
// transaction (PostgreSQL would end it) on a loaded machine.
func testOpts(opts ...seqpg.Option) []seqpg.Option {
	return append([]seqpg.Option{
		seqpg.WithPollInterval(50 * time.Millisecond),
		seqpg.WithLease(10 * time.Second),
		seqpg.WithRetries(3, func(context.Context, *seqpg.Job, int, error) time.Duration { return 10 * time.Millisecond }),
	}, opts...)
}

// startWorker runs a worker until the test ends.
func startWorker(t testing.TB, pool *pgxpool.Pool, h seqpg.Handler, opts ...seqpg.Option) *seqpg.Worker {
	t.Helper()
	w, err := seqpg.NewWorker(pool, h, testOpts(opts...)...)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Close(ctx))
		require.NoError(t, <-done)
	})
	return w
}

// recorder records the payloads handlers saw, per key, in order.
type recorder struct {
	mu   sync.Mutex
	seen map[string][]string
	all  []string
	ch   chan string // each payload as it is seen
}

func newRecorder() *recorder {
	return &recorder{seen: map[string][]string{}, ch: make(chan string, 10000)}
}

func (r *recorder) add(job *seqpg.Job) {
	r.mu.Lock()
	r.seen[job.Key] = append(r.seen[job.Key], string(job.Payload))
	r.all = append(r.all, string(job.Payload))
	r.mu.Unlock()
	r.ch <- string(job.Payload)
}

func (r *recorder) of(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen[key]...)
}

// wait returns the next n payloads seen, failing after 10s.
func (r *recorder) wait(t testing.TB, n int) []string {
	t.Helper()
	var got []string
	timeout := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case p := <-r.ch:
			got = append(got, p)
		case <-timeout:
			t.Fatalf("saw %d of %d jobs: %v", len(got), n, got)
		}
	}
	return got
}

// handler records each job and succeeds.
func (r *recorder) handler(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
	r.add(job)
	return nil
}

// eventually polls cond every 10ms until it holds, failing after 10s. It
// waits for a state of the database that nothing signals; it is not used
// to order events.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recv returns the next value on ch, failing after 10s with what it
// waited for: a test whose guarantee broke fails with a message rather
// than hangs until the binary's timeout.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
	}
	t.Fatalf("timed out waiting for %s", what)
	var zero T
	return zero
}

func state(t testing.TB, pool *pgxpool.Pool, key string) seqpg.KeyState {
	t.Helper()
	s, err := seqpg.State(context.Background(), pool, key)
	require.NoError(t, err)
	return s
}

type (
	contextT = context.Context
	rowT     = pgx.Row
)

var bg = context.Background()

// waitOrDone waits for ch to close or ctx to end: a handler a test holds
// still obeys its ctx, so that a failed test's Close does not hang.
func waitOrDone(ctx context.Context, ch <-chan struct{}) {
	select {
	case <-ch:
	case <-ctx.Done():
	}
}
