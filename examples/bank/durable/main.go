// Command durable runs the bank's script on seqpg, durably: 200 accounts
// from 100, "withdraw 50, deposit 100, withdraw 150" each, every
// operation recorded and enqueued in one transaction, applied by a worker
// process that is killed (SIGKILL) a third of the way through and
// restarted. It then checks that every balance is exactly 0, every
// operation applied once, each account's in order, and exits 1 if not.
//
//	go run ./examples/bank/durable                  # a throwaway PostgreSQL (needs initdb/postgres installed)
//	go run ./examples/bank/durable -dsn postgres://... # an empty database of yours
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/seqsched/seqsched/examples/bank/internal/durable"
	"github.com/seqsched/seqsched/internal/pgtest"
	"github.com/seqsched/seqsched/seqpg"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("durable", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", "", "PostgreSQL to use (an empty database); default: start a throwaway one")
	accounts := fs.Int("accounts", 200, "accounts")
	worker := fs.Bool("worker", false, "run as the worker process (internal)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *worker {
		return runWorker(ctx, *dsn, stderr)
	}
	if *dsn == "" {
		srv, err := pgtest.New()
		if err != nil {
			fmt.Fprintln(stderr, "durable:", err)
			return 1
		}
		defer srv.Close()
		*dsn = srv.DSN
	}
	if err := demo(ctx, *dsn, *accounts, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "durable:", err)
		return 1
	}
	return 0
}

func demo(ctx context.Context, dsn string, accounts int, stdout, stderr io.Writer) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := durable.Setup(ctx, pool); err != nil {
		return err
	}
	if err := durable.Open(ctx, pool, accounts, 100); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, accounts)
	for a := range int64(accounts) {
		wg.Go(func() {
			for _, s := range []struct {
				op     durable.Op
				amount int64
			}{{durable.Withdraw, 50}, {durable.Deposit, 100}, {durable.Withdraw, 150}} {
				if err := durable.Submit(ctx, pool, a+1, s.op, s.amount); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	total := 3 * accounts
	fmt.Fprintf(stdout, "submitted %d operations on %d accounts\n", total, accounts)

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	start := func() (*exec.Cmd, error) {
		cmd := exec.Command(exe, "-worker", "-dsn", dsn)
		cmd.Stdout, cmd.Stderr = stderr, stderr
		return cmd, cmd.Start()
	}
	w, err := start()
	if err != nil {
		return err
	}
	if err := waitFor(ctx, pool, `SELECT count(*) >= $1 FROM applied`, total/3); err != nil {
		return err
	}
	w.Process.Kill()
	w.Wait()
	var at int
	pool.QueryRow(ctx, `SELECT count(*) FROM applied`).Scan(&at)
	fmt.Fprintf(stdout, "killed the worker (SIGKILL) after %d operations; starting another\n", at)
	if w, err = start(); err != nil {
		return err
	}
	defer func() {
		w.Process.Signal(os.Interrupt)
		w.Wait()
	}()
	if err := waitFor(ctx, pool, `SELECT NOT EXISTS (SELECT 1 FROM seqpg_jobs)`); err != nil {
		return err
	}
	rep, err := durable.Check(ctx, pool, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "applied %d of %d, twice %d, out of order %d, balances not 0: %d, halted %d\n",
		rep.Applied, rep.Requests, rep.Twice, rep.OutOfOrder, rep.Nonzero, rep.Halted)
	if !rep.OK() {
		return fmt.Errorf("check failed: %+v", rep)
	}
	fmt.Fprintln(stdout, "every balance is exactly 0; every operation applied once, in order")
	return nil
}

// waitFor polls cond (with args) every 20ms for up to a minute.
func waitFor(ctx context.Context, pool *pgxpool.Pool, cond string, args ...any) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var ok bool
		if err := pool.QueryRow(ctx, cond, args...).Scan(&ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s", cond)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runWorker is the worker process: it applies operations until
// interrupted, a few milliseconds each so that the kill lands mid-run.
func runWorker(ctx context.Context, dsn string, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		fmt.Fprintln(stderr, "durable worker:", err)
		return 1
	}
	defer pool.Close()
	w, err := durable.NewWorker(pool, seqpg.WithLease(2*time.Second), seqpg.WithMaxConcurrency(8),
		seqpg.WithInterceptor(func(ctx context.Context, job *seqpg.Job, next func(context.Context) error) error {
			time.Sleep(5 * time.Millisecond)
			return next(ctx)
		}))
	if err != nil {
		fmt.Fprintln(stderr, "durable worker:", err)
		return 1
	}
	w.Run(ctx)
	return 0
}
