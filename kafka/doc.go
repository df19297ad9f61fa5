// Package kafka consumes Kafka topics with records of different keys handled
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
//	c, err := kafka.NewConsumer([]kgo.Opt{
//		kgo.SeedBrokers("localhost:9092"),
//		kgo.ConsumerGroup("billing"),
//		kgo.ConsumeTopics("orders"),
//	}, func(ctx context.Context, r *kgo.Record) error {
//		return apply(ctx, r) // records of one key never overlap
//	}, kafka.WithMaxConcurrency(100))
//	if err != nil { ... }
//	go c.Run(ctx)
//	...
//	err = c.Close(ctx) // drain, commit, leave the group
//
// # Guarantees
//
//   - Order per key: the records of one (topic, partition, key) run one at a
//     time, in offset order; records without a key are ordered per partition
//     (or each on its own with WithUnorderedNoKey). A record whose priority
//     header (WithPriorityHeader) says "high" runs before its key's queued
//     records: this reorders the key, by design.
//   - Bounded parallelism: at most WithMaxConcurrency handlers run at once,
//     shared fairly among keys (seqsched's turns).
//   - At least once, never lost: a partition's commit is the lowest offset
//     not yet done (handled successfully, or dead-lettered). The commit
//     metadata lists done offsets above it (at most MaxMetadataBytes; what
//     does not fit is left out, so replayed). A new owner skips them.
//     Metadata it cannot read (foreign, corrupt, or not about the committed
//     offset) is ignored with a warning: replay, never skip.
//   - Retries: a failing record (an error, a panic, or runtime.Goexit in
//     the handler) is retried after a backoff
//     (WithRetries) that blocks only its key, then goes to the dead-letter
//     handler (WithDeadLetter, DeadLetterTopic). It never blocks other keys
//     or other partitions' commits.
//   - Rebalances: when partitions are revoked, the consumer stops taking
//     their records, waits up to WithDrainTimeout for those taken, commits,
//     and only then lets the rebalance go on; handlers still running after
//     the drain timeout see their ctx canceled. When partitions are lost,
//     their state is dropped without a commit.
//   - Bounded memory: once WithMaxBuffered's high mark of records are taken
//     and not done, fetching is paused (kgo's PauseFetchPartitions) until
//     the low mark, whatever the lag.
//   - Shutdown: Close stops fetching, drains, commits and leaves the group;
//     past its ctx it commits what is done and returns ctx's error.
//
// Delivery is at least once: a record whose handler ran but whose offset
// was not committed before a crash (or a lost partition, or a drain
// timeout) runs again on the next owner. Make handlers idempotent.
//
// The consumer owns its kgo.Client and sets the client options it relies
// on (see NewConsumer). Stats returns a snapshot for metrics; the README
// shows how to export it to Prometheus or OpenTelemetry.
package kafka
