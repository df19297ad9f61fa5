// Command chat is a chat room over WebSockets in which every connection is a
// seqsched session. Open the printed URL in two browser tabs and chat; press
// Ctrl-C to shut down gracefully (every client gets what was queued for it,
// then a "going away" close). The scheduler's metrics are at /metrics on a
// port of their own (-metrics-port), in Prometheus's text format. The
// README lists the room's limits and who may kick.
//
//	go run ./examples/chat            # http://127.0.0.1:8080/
//	go run ./examples/chat -port 0    # any free port
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
