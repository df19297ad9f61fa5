// Package seqpg runs durable jobs on PostgreSQL one at a time per key, in
// commit order, and different keys in parallel, across any number of
// worker processes sharing one database.
//
// Job queues on PostgreSQL (River's free edition, pg-boss, graphile-worker)
// run jobs in parallel with no order; a bank account's "withdraw 50,
// deposit 100, withdraw 150" must survive a crash, run once, and run in
// order. seqpg gives each key that guarantee, and seqsched's per-key
// control (High, Pause, halts, Replace, Discard) made durable:
//
//	seqpg.Migrate(ctx, pool) // once, at start: embedded, versioned SQL
//
//	// In the request's transaction: the job exists iff the request's writes commit.
//	tx, _ := pool.Begin(ctx)
//	tx.Exec(ctx, `INSERT INTO requests ...`)
//	seqpg.Enqueue(ctx, tx, "account-42", payload)
//	tx.Commit(ctx)
//
//	// In each worker process: the handler writes in the transaction that completes the job.
//	w, _ := seqpg.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
//		_, err := tx.Exec(ctx, `UPDATE accounts ...`)
//		return err
//	})
//	go w.Run(ctx)
//	defer w.Close(ctx)
//
// # Guarantees
//
//   - Order per key is commit order: a job whose enqueuing transaction
//     commits first runs first (see Enqueue for how, and its price).
//   - At most one job of a key runs at a time, across all workers, under
//     a lease with a fencing token (LeaseOf); a worker that lost the lease
//     can neither complete nor fail the job.
//   - Exactly-once effects in the same database: the handler's writes in
//     its transaction commit with the job's completion, or not at all.
//     Effects elsewhere are at least once: fence them with LeaseOf's token
//     or make them idempotent.
//   - A failing, retrying, paused or halted key blocks only itself.
//   - A key's next job is the first entry of an index under the key: it
//     costs the same with one job or a hundred thousand behind it.
//   - An idle key's new job starts within a NOTIFY round trip; polling
//     (WithPollInterval) covers lost notifications and poolers.
//   - Inside a worker, keys run as sessions of a seqsched.Scheduler.
//
// A held key's consecutive jobs share one transaction, each under a
// savepoint of its own, and commit together (WithGroupCommit): a job's
// writes become visible when its group commits, and a worker that dies
// with a group open leaves its jobs to run again, their effects rolled
// back with them.
//
// For more throughput, WithBatchedCompletion gives up the job's transaction:
// a key's jobs are read several at a time and their completions recorded
// in one statement, so effects become at least once (fence and dedupe
// them); order, the fenced lease and durability stay.
//
// # What it does not do
//
// No scheduled (run-at) jobs, no cron, no unique jobs beyond Replace, no
// job priorities across keys (High is within a key), no UI. A key's jobs
// run one at a time everywhere, so a key's throughput is one job per
// handler call and round trip. Enqueuers of one key wait for each other's
// commits.
//
// # The contract with your code
//
// A handler may panic or call runtime.Goexit: the attempt fails with a
// *seqsched.PanicError or an error wrapping seqsched.ErrGoexit, and the
// worker goes on. Handlers, interceptors and backoff functions run with no
// lock of the worker held. A ctx is trusted to keep its contract.
package seqpg
