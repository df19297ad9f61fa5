package seqpg_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/seqsched/seqsched/internal/pgtest"
	"github.com/seqsched/seqsched/seqpg"
)

// The examples named *_live run against the PostgreSQL server the tests
// start; without one (outside CI) TestMain skips them, as it skips the
// tests.

// examplePool stands for your pool: a fresh, migrated database on the
// server the tests share.
func examplePool(ctx context.Context) *pgxpool.Pool {
	s, err := pgtest.SharedServer()
	if err != nil {
		panic(err)
	}
	dsn, err := s.CreateDatabase()
	if err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		panic(err)
	}
	if err := seqpg.Migrate(ctx, pool); err != nil {
		panic(err)
	}
	return pool
}

// start runs w; stop waits for n jobs to call done, then closes w.
func start(ctx context.Context, w *seqpg.Worker) (stop func(done <-chan struct{}, n int)) {
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	return func(done <-chan struct{}, n int) {
		for range n {
			<-done
		}
		if err := w.Close(ctx); err != nil {
			panic(err)
		}
		if err := <-ran; err != nil {
			panic(err)
		}
	}
}

// A bank account's operations, each enqueued in the transaction of its
// request, run in commit order, each writing in the transaction that
// completes its job: the balance never goes below zero, which it would if
// the last withdrawal ran before the deposit.
func Example_live() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()
	_, err := pool.Exec(ctx, `
CREATE TABLE accounts (id text PRIMARY KEY, balance int NOT NULL CHECK (balance >= 0));
INSERT INTO accounts VALUES ('account-42', 100)`)
	if err != nil {
		panic(err)
	}

	for _, op := range []string{"withdraw 50", "deposit 100", "withdraw 150"} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// ... the request's own writes, then its job:
			_, err := seqpg.Enqueue(ctx, tx, "account-42", []byte(op))
			return err
		})
		if err != nil {
			panic(err)
		}
	}

	done := make(chan struct{}, 3)
	w, err := seqpg.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		var verb string
		var amount int
		fmt.Sscan(string(job.Payload), &verb, &amount)
		if verb == "withdraw" {
			amount = -amount
		}
		var balance int
		err := tx.QueryRow(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2 RETURNING balance`,
			amount, job.Key).Scan(&balance)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %s, balance %d\n", job.Key, job.Payload, balance)
		done <- struct{}{}
		return nil
	})
	if err != nil {
		panic(err)
	}
	start(ctx, w)(done, 3)

	s, err := seqpg.State(ctx, pool, "account-42")
	if err != nil {
		panic(err)
	}
	fmt.Println("jobs left:", s.Pending)
	// Output:
	// account-42: withdraw 50, balance 50
	// account-42: deposit 100, balance 150
	// account-42: withdraw 150, balance 0
	// jobs left: 0
}

// Replace keeps the latest of a key's jobs that carry one tag and have not
// started: three presence updates enqueued while no worker runs are one
// job, with the last payload, in the place of the first.
func ExampleReplace_live() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()
	for _, p := range []string{"online", "away", "offline"} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			e, err := seqpg.Enqueue(ctx, tx, "user-7", []byte(p), seqpg.Replace("presence"))
			fmt.Printf("%s: seq %d, replaced %v\n", p, e.Seq, e.Replaced)
			return err
		})
		if err != nil {
			panic(err)
		}
	}

	done := make(chan struct{}, 1)
	w, err := seqpg.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		fmt.Printf("ran %s: %s\n", job.Key, job.Payload)
		done <- struct{}{}
		return nil
	})
	if err != nil {
		panic(err)
	}
	start(ctx, w)(done, 1)
	// Output:
	// online: seq 1, replaced false
	// away: seq 1, replaced true
	// offline: seq 1, replaced true
	// ran user-7: offline
}

// A paused key keeps its jobs, durably, until Resume, even with a worker
// running; then a High job runs before the key's queued ones.
func ExamplePause_live() {
	ctx := context.Background()
	pool := examplePool(ctx)
	defer pool.Close()
	if err := seqpg.Pause(ctx, pool, "account-9"); err != nil {
		panic(err)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := seqpg.Enqueue(ctx, tx, "account-9", []byte("deposit 10")); err != nil {
			return err
		}
		_, err := seqpg.Enqueue(ctx, tx, "account-9", []byte("freeze"), seqpg.High())
		return err
	})
	if err != nil {
		panic(err)
	}
	s, err := seqpg.State(ctx, pool, "account-9")
	if err != nil {
		panic(err)
	}
	fmt.Printf("paused %v, %d jobs\n", s.Paused, s.Pending)

	done := make(chan struct{}, 2)
	w, err := seqpg.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		fmt.Printf("ran %s (high %v)\n", job.Payload, job.High)
		done <- struct{}{}
		return nil
	})
	if err != nil {
		panic(err)
	}
	stop := start(ctx, w)
	fmt.Println("resuming") // the worker runs nothing of the key before
	if err := seqpg.Resume(ctx, pool, "account-9"); err != nil {
		panic(err)
	}
	stop(done, 2)
	// Output:
	// paused true, 2 jobs
	// resuming
	// ran freeze (high true)
	// ran deposit 10 (high false)
}
