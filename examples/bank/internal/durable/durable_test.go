//go:build linux

package durable_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/seqsched/seqsched/examples/bank/internal/durable"
	"github.com/seqsched/seqsched/internal/pgtest"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

const workerEnv = "BANK_DURABLE_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain())
	}
	goleak.VerifyTestMain(m)
}

// workerMain is a worker process: it applies operations until SIGTERM,
// slowly enough that a kill lands mid-run.
func workerMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("BANK_DSN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	w, err := durable.NewWorker(pool, workerOpts()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w.Run(ctx)
	return 0
}

// The bank's script on 50 accounts from 100, "withdraw 50, deposit 100,
// withdraw 150", each operation recorded and enqueued in one transaction,
// run by a worker process that is killed with SIGKILL mid-run and
// restarted: every balance ends at exactly 0, no operation is applied
// twice or lost, and each account's operations are applied in the order
// they were submitted (out of order, the script overdraws and halts the
// account).
func TestDurableBankSurvivesKilledWorker(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, srv.DSN)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, durable.Setup(ctx, pool))
	const accounts = 50
	require.NoError(t, durable.Open(ctx, pool, accounts, 100))

	exe, err := os.Executable()
	require.NoError(t, err)
	var out bytes.Buffer
	var outMu sync.Mutex
	start := func() *exec.Cmd {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"=1", "BANK_DSN="+srv.DSN)
		cmd.Stdout, cmd.Stderr = &lockedWriter{&outMu, &out}, &lockedWriter{&outMu, &out}
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		require.NoError(t, cmd.Start())
		return cmd
	}
	worker := start()
	defer func() {
		worker.Process.Kill()
		worker.Wait()
		if t.Failed() {
			outMu.Lock()
			t.Logf("worker output:\n%s", out.String())
			outMu.Unlock()
		}
	}()

	var wg sync.WaitGroup
	for a := range int64(accounts) {
		wg.Go(func() {
			for _, s := range []struct {
				op     durable.Op
				amount int64
			}{{durable.Withdraw, 50}, {durable.Deposit, 100}, {durable.Withdraw, 150}} {
				if err := durable.Submit(ctx, pool, a+1, s.op, s.amount); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()

	// Kill the worker once some, not all, operations are applied.
	waitFor(t, pool, `SELECT count(*) >= 20 FROM applied`)
	require.NoError(t, worker.Process.Signal(syscall.SIGKILL))
	worker.Wait()
	var mid int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM applied`).Scan(&mid))
	require.Less(t, mid, 3*accounts, "the kill must land mid-run")
	worker = start()
	waitFor(t, pool, `SELECT NOT EXISTS (SELECT 1 FROM seqpg_jobs)`)

	rep, err := durable.Check(ctx, pool, 0)
	require.NoError(t, err)
	assert.Equal(t, durable.Report{Requests: 3 * accounts, Applied: 3 * accounts}, rep,
		"every operation applied once, in order; every balance 0; nothing halted")
	t.Logf("killed the worker after %d of %d operations", mid, 3*accounts)
}

// waitFor polls a condition in the database every 10ms, for up to a
// minute. Nothing signals the database's state to the test.
func waitFor(t *testing.T, pool *pgxpool.Pool, cond string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var ok bool
		require.NoError(t, pool.QueryRow(context.Background(), cond).Scan(&ok))
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", cond)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// workerOpts are the test worker's options: a short lease, so that the
// killed worker's accounts come back quickly, and a slow operation, so
// that the kill lands mid-run.
func workerOpts() []seqpg.Option {
	return []seqpg.Option{
		seqpg.WithLease(time.Second), seqpg.WithPollInterval(50 * time.Millisecond), seqpg.WithMaxConcurrency(4),
		seqpg.WithInterceptor(func(ctx context.Context, job *seqpg.Job, next func(context.Context) error) error {
			time.Sleep(20 * time.Millisecond)
			return next(ctx)
		}),
	}
}
