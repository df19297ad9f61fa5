// Command watermill runs a watermill Router over a stream of per-account
// events with a 1ms handler, three ways, and prints each one's throughput
// and order violations (an event handled after a later event of its
// account): the plain Router on the default gochannel (parallel, order
// broken), the plain Router on an ordered gochannel (one event at a time),
// and the Router with seqwatermill's decorator on the ordered gochannel (in
// order per account, accounts in parallel).
//
//	go run ./examples/watermill
//	go run ./examples/watermill -events 20000 -accounts 1000 -latency 1ms
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
