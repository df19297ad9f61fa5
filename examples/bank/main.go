// Command bank replays "balance 100; withdraw 50, deposit 100, withdraw 150"
// on 1,000 accounts at once, with other accounts' traffic interleaved, on a
// real database, and checks that every balance ends at exactly 0. Each
// account's operations are seqsched tasks keyed by the account ID.
//
//	go run ./examples/bank              # SQLite in a temp file; exits 0
//	go run ./examples/bank -unordered   # plain goroutines: shows failures, exits 1
//	go run ./examples/bank -db postgres://user:pass@127.0.0.1/bank
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
