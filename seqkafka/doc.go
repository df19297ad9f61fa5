// Package seqkafka consumes Kafka topics with records of different keys handled
// in parallel and the records of each key in offset order, on franz-go.
//
// A partition is consumed in order, so a slow handler caps it at one record
// per handler latency. Handling different keys in parallel removes that cap,
// but records then finish out of order, and committing the highest finished
// offset would lose the unfinished ones below it on a crash. A Consumer runs
// each key as a seqsched session, bounds the parallelism, and commits only
// the offset below which everything is done, with the finished offsets above
// it kept in the commit metadata so that a restart replays only what was
// really in flight.
//
//	c, err := seqkafka.NewConsumer([]kgo.Opt{
//		kgo.SeedBrokers("localhost:9092"),
//		kgo.ConsumerGroup("billing"),
//		kgo.ConsumeTopics("orders"),
//	}, func(ctx context.Context, r *kgo.Record) error {
//		return apply(ctx, r) // records of one key never overlap
//	}, seqkafka.WithMaxConcurrency(100))
//	if err != nil { ... }
//	go c.Run(ctx)
//	...
//	err = c.Close(ctx) // drain, commit, leave the group
//
// NewBatchConsumer does the same for a handler that takes records in
// batches (a bulk insert), at most one record per key in a batch.
//
// # Guarantees
//
//   - Order per key: the records of one (topic, partition, key) run one at a
//     time, in offset order; records without a key are ordered per partition
//     (or each on its own with WithUnorderedNoKey). With WithPriorityHeader,
//     a record whose priority header says "high" runs before its key's
//     queued records: this reorders the key, by design. It is off by
//     default, since any producer could set the header.
//   - Bounded parallelism: at most WithMaxConcurrency handler calls run at
//     once, shared fairly among keys (seqsched's turns).
//   - At least once, never lost: a partition's commit is the lowest offset
//     not yet done (handled successfully, or dead-lettered). The commit
//     metadata lists done offsets above it (at most WithMaxMetadataBytes;
//     what does not fit is left out, so replayed). A new owner skips them,
//     and passes them on in its own commits until it has fetched them.
//     Metadata it cannot read (foreign, corrupt, or not about the committed
//     offset) is ignored with a warning: replay, never skip.
//   - Retries: a failing record (an error, a panic as a
//     *seqsched.PanicError, or runtime.Goexit as an error wrapping
//     seqsched.ErrGoexit, in the handler) is retried after a backoff
//     (WithRetries) that blocks only its key, unless its error is terminal
//     (Terminal); then it goes to the dead-letter step (WithDeadLetter,
//     DeadLetterTopic), which is retried until it succeeds. It never
//     blocks other keys or other partitions' commits. Attempt tells a
//     handler which attempt it makes.
//   - Rebalances: when partitions are revoked, the consumer stops taking
//     their records, waits up to WithDrainTimeout for those taken, commits,
//     and only then lets the rebalance go on; handlers still running after
//     the drain timeout see their ctx canceled. When partitions are lost,
//     their state is dropped without a commit.
//   - Bounded memory, per partition: a partition has at most
//     WithMaxBuffered's high mark of records taken and not done, plus one
//     poll's worth waiting; then it takes no more (its fetching pauses,
//     kgo's PauseFetchPartitions, when others go on) until its low mark,
//     whatever the lag. What the consumer tracks of a partition is bounded
//     by its records not done, not by those seen. Keys are
//     producer-chosen and may be as long as a record: a key longer than
//     64 bytes is tracked as its SHA-256 (32 bytes), so the keys of done
//     records, which seqsched keeps for a while as idle sessions, take a
//     bounded amount of memory whatever producers send.
//   - Pause and Resume stop and restart taking records (downstream is down)
//     without leaving the group.
//   - Shutdown: Close stops fetching, drains, commits and leaves the group;
//     past its ctx it gives up (handlers' ctxs are canceled), commits what
//     is done and returns ctx's error, as the core's Scheduler.Shutdown
//     drains and gives up in one call. A final commit that failed is
//     returned as a *CommitError, except for partitions a rebalance took
//     from the member meanwhile: those are its next owner's (logged).
//
// Delivery is at least once: a record whose handler ran but whose offset
// was not committed before a crash (or a lost partition, or a drain
// timeout) runs again on the next owner. Make handlers idempotent.
//
// The consumer owns its kgo.Client and sets the client options it relies
// on (see NewConsumer). Failures are logged to WithLogger's logger, else
// to slog.Default(). Stats returns a snapshot for metrics: counters,
// gauges and histograms in seqsched's fixed buckets, per partition where
// it matters.
package seqkafka

// Design notes, for maintainers.
//
// Files: consumer.go (the Consumer, its constructors), lifecycle.go (Run,
// Close), poll.go (the poll loop, taking records, fetch pauses,
// Pause/Resume), partition.go (a partition's progress: offsets not done,
// watermark, done ranges, inherited ranges), window.go (a partition's
// bound), job.go (one record's attempts and dead-letter step), batch.go
// (NewBatchConsumer's batches), commit.go, rebalance.go, contain.go
// (calling user code), stats.go, metadata.go (the commit metadata format).
//
// Goroutines: Run's caller runs the poll loop, and Run owns the commit loop.
// Records run as tasks of three seqsched schedulers owned by the consumer
// and shut down by Close: sched (a session per key, WithMaxConcurrency),
// batches (a session per batch, WithMaxConcurrency) and timers (backoff and
// linger waits, unbounded; awaited from a task, so the task's slot is lent
// meanwhile). The client calls the rebalance callbacks on its own
// goroutines. A log line runs the logger on a goroutine of its own (see
// log). Close leaves the group itself, then closes the client with
// closeClient, which opens kgo's rebalance gate for good afterwards: the
// leave goroutine kgo's Client.Close starts may reach that gate after
// Client.Close's own last poll has shut it, and would wait there for ever.
//
// Locks: commitMu, then mu, then a partition's mu; fetchMu, then mu, then a
// partition's mu; pauseMu alone. None is held while user code runs or
// across a drain. Only commitMu is held across a wait (a commit's round
// trip), and no user code or record takes it; fetchMu is held across kgo's
// Pause/ResumeFetchPartitions, which do not block.
//
// User code runs only at these call sites, each through call (contain.go),
// which turns a panic into a *seqsched.PanicError with its stack and tells
// a runtime.Goexit apart (an error wrapping seqsched.ErrGoexit). The
// interceptors (WithInterceptor) run at the handler's site, wrapped around
// it, and fare as it does:
//
//	site             where               goroutine        panic                          runtime.Goexit
//	handler          callHandler         record's task    attempt fails (*PanicError)    attempt fails (ErrGoexit); job.takeOver goes on
//	batch handler    batch.run           batch's task     every record's attempt fails;  so for ErrGoexit, via batch.finish (deferred)
//	backoff          job.askBackoff      record's task    logged; DefaultBackoff's wait  the same; job.takeOver goes on
//	dead-letter fn   job.deadLetter      record's task    it failed: retried             the same; job.takeOver goes on
//	logger           log                 its own          line lost                      line lost
//	caller's ctx     Run, Close          the caller's     Close still closes (closeAndSignal), then the panic goes on
//
// Every one may call back into the consumer. Close from a callback, given
// the callback's ctx (callCtx marks it), starts the close on a goroutine of
// its own and returns an error wrapping seqsched.ErrWouldDeadlock, since
// it cannot wait for its own caller; Pause, Resume and Stats never wait
// for user code. A call that
// blocks holds its own record (its key; its partition's drain until the
// drain timeout) and one concurrency slot, nothing else; a logger that
// blocks holds its caller until the caller's ctx ends (see log).
//
// A record's life: the poll loop takes it (partition.offs, the window),
// posts a job on its key's session; the job runs gate → attempts →
// dead-letter step and settles the record in its partition (done, or given
// back not done). Revocation (rebalance.go) stops taking, drains to no open
// record or the drain timeout, cancels the rest, commits and forgets; it
// then discards the partition's sessions (seqsched's Scheduler.Discard),
// waiting, within the revocation's bound, for the handlers still running.
// A lost partition is discarded without a wait (noWait): another member
// may own it already. A revocation that meets partitions another one is
// revoking already (Close's, or kgo's while Close runs) leaves them to it,
// but returns only once they are forgotten, so that kgo hands none on
// while its records still run here.
