// Command chat is a chat room over WebSockets in which every connection is a
// seqsched session. Open the printed URL in two browser tabs and chat; press
// Ctrl-C to shut down gracefully (every client gets what was queued for it,
// then a "going away" close).
//
//	go run ./examples/chat            # http://127.0.0.1:8080/
//	go run ./examples/chat -port 0    # any free port
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		var usage usageError
		isUsage := errors.As(err, &usage)
		if !usage.shown {
			fmt.Fprintln(os.Stderr, "chat:", err)
		}
		if isUsage {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
