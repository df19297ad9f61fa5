// Command jetstream consumes a partitioned NATS JetStream stream with
// seqjetstream: messages of one key in stream order, keys in
// parallel, order kept across instances. It starts a nats-server in this
// process, publishes keyed messages with skewed (zipf) key popularity to a
// stream partitioned by key, consumes them with two instances sharing the
// partitions out and then three (a scale-out), kills the busiest one, and
// prints each instance's partitions at each step. It checks the result
// with a store that skips a message whose stream sequence is at or below
// the last one applied for its key, and refuses a write from an owner
// whose epoch is below its partition's latest. Then it times the same work done the two ways NATS users have
// today: one consumer per partition with MaxAckPending=1, and a worker pool
// on one consumer (which breaks key order: its violations are counted).
//
//	go run ./examples/jetstream            # exits 0 when nothing is lost, reordered or applied twice
//	go run ./examples/jetstream -kill=false -messages 50000
package main

import (
	"context"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
