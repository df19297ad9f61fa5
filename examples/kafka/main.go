// Command kafka consumes keyed Kafka records with a seqkafka.Consumer
// group: records of one key in order, different keys in parallel. It starts
// a 3-broker in-process cluster (kfake), produces records with skewed key
// popularity, some marked High and a few poison, consumes them with three
// members, kills one ungracefully halfway and adds another, then checks the
// result against an idempotent store and compares the time with a
// goroutine-per-partition consumer on the same data.
//
//	go run ./examples/kafka                          # kfake cluster; exits 0 when nothing is lost or out of order
//	go run ./examples/kafka -brokers 127.0.0.1:9092  # a real cluster (creates its own topics)
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
