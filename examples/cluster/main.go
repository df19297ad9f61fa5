// Command cluster keeps per-session order end to end across several
// processes, on NATS JetStream and seqsched.
//
// Producers publish each session's messages on "sessions.<id>". The stream
// maps every session onto one of P partitions with the server's
// deterministic partition() subject transform; each partition is a durable
// pull consumer with the pinned-client priority policy, so the server
// delivers it to exactly one node at a time and pins another node when that
// one goes silent. A node queues each delivered message on a
// seqsched.Scheduler keyed by session, High messages (marked by a header) on
// the High lane, and acknowledges it only after its task applied it. Each
// message carries its number within its session and lane; the last applied
// number is stored with the state it produced, so a redelivered message is
// recognised and skipped, and one that arrives before its predecessor is
// sent back to be redelivered after it.
//
// Run with no flags, it starts an embedded NATS server (127.0.0.1, free
// port, JetStream in a temporary directory) and three nodes in this process,
// sends 100,000 messages over 1,000 sessions from 4 producers, kills the
// busiest node halfway, and prints what was delivered, order violations,
// duplicates, throughput and latency. It exits 1 if any message was lost,
// applied twice or out of order.
//
//	go run ./examples/cluster
//	go run ./examples/cluster -nats nats://127.0.0.1:4222 # an external server with JetStream
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program; it returns the exit code: 0 for a run that lost,
// duplicated and reordered nothing, 1 for one that did or failed, and 2 for
// a bad command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sc, timeout, err := parseFlags(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		return 2 // as the flag package does; parseFlags printed why
	}
	sc.Log = stdout

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := Run(ctx, sc)
	if res.Nodes != nil { // the run got as far as its nodes: report what they did
		report(stdout, sc, res)
	}
	if err != nil {
		fmt.Fprintln(stderr, "cluster:", strings.TrimPrefix(err.Error(), "cluster: "))
	}
	if err != nil || res.Lost != 0 || res.Violations != 0 || res.Duplicates != 0 {
		return 1
	}
	return 0
}

// Limits on the size of a run, so that a mistyped flag gets an error
// instead of a crash or a run that cannot finish.
const (
	// maxConns bounds -nodes and -producers each: every one is a NATS
	// connection of its own, in this process.
	maxConns = 1000
	// maxPulls bounds -nodes × -partitions: every node pulls from every
	// partition, a subscription each; 100 nodes × 1000 partitions did not
	// finish setting up within a minute.
	maxPulls = 10_000
	// maxMessages bounds -messages: the audit keeps every applied message
	// in memory, and the embedded server stores each on disk.
	maxMessages = 10_000_000
)

// parseFlags reads args into a Scenario and the run's timeout. A bad
// command line is reported on stderr, as the flag package does (a value
// the run cannot use in one line), and returned as an error.
func parseFlags(args []string, stderr io.Writer) (Scenario, time.Duration, error) {
	sc := Scenario{
		Topology: Topology{
			Stream:        "SEQSCHED_CLUSTER",
			AckWait:       2 * time.Second,
			PullExpiry:    time.Second,
			PinnedTTL:     4 * time.Second,
			RetryDelay:    100 * time.Millisecond,
			MaxAckPending: 1000,
		},
	}
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&sc.URL, "nats", "", "URL of a NATS server with JetStream (default: start an embedded one on 127.0.0.1)")
	fs.IntVar(&sc.Nodes, "nodes", 3, "nodes (consumer processes, run in this process)")
	fs.IntVar(&sc.Producers, "producers", 4, "producers, each with its own connection and its own sessions")
	fs.IntVar(&sc.Sessions, "sessions", 1000, "sessions")
	fs.IntVar(&sc.Messages, "messages", 100_000, "messages in all, a multiple of -sessions")
	fs.IntVar(&sc.HighEvery, "high-every", 100, "mark every n-th message High (0: none)")
	fs.IntVar(&sc.Topology.Partitions, "partitions", 12, "partitions P")
	fs.BoolVar(&sc.Kill, "kill", true, "kill the busiest node when half the messages are applied")
	timeout := fs.Duration("timeout", 3*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return sc, 0, err
	}
	err := checkFlags(sc, *timeout)
	if fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q (all options are flags)", fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(stderr, "cluster:", err)
		return sc, 0, err
	}
	return sc, *timeout, nil
}

// checkFlags rejects flag values the run cannot use, before it starts a
// server, in the flags' terms ([Scenario.validate] is Run's own check).
func checkFlags(sc Scenario, timeout time.Duration) error {
	switch {
	case sc.Nodes < 1 || sc.Nodes > maxConns:
		return fmt.Errorf("-nodes %d: must be 1..%d", sc.Nodes, maxConns)
	case sc.Kill && sc.Nodes < 2:
		return fmt.Errorf("-nodes %d: must be at least 2 to kill one (or give -kill=false)", sc.Nodes)
	case sc.Producers < 1 || sc.Producers > maxConns:
		return fmt.Errorf("-producers %d: must be 1..%d", sc.Producers, maxConns)
	case sc.Sessions < sc.Producers:
		return fmt.Errorf("-sessions %d: must be at least -producers (%d): each producer owns its sessions", sc.Sessions, sc.Producers)
	case sc.Messages < 1 || sc.Messages > maxMessages:
		return fmt.Errorf("-messages %d: must be 1..%d", sc.Messages, maxMessages)
	case sc.Messages%sc.Sessions != 0:
		return fmt.Errorf("-messages %d: must be a multiple of -sessions (%d)", sc.Messages, sc.Sessions)
	case sc.HighEvery < 0:
		return fmt.Errorf("-high-every %d: must not be negative (0: none)", sc.HighEvery)
	case sc.Topology.Partitions < 1:
		return fmt.Errorf("-partitions %d: must be at least 1", sc.Topology.Partitions)
	case sc.Topology.Partitions > maxPulls/sc.Nodes:
		return fmt.Errorf("-nodes %d × -partitions %d: more than %d pulls (every node pulls from every partition)",
			sc.Nodes, sc.Topology.Partitions, maxPulls)
	case timeout <= 0:
		return fmt.Errorf("-timeout %v: must be positive", timeout)
	}
	return nil
}

// report prints what a run measured.
func report(w io.Writer, sc Scenario, res Result) {
	highs := 0
	if sc.HighEvery > 0 {
		highs = sc.Messages / sc.HighEvery
	}
	fmt.Fprintf(w, "sent %d messages over %d sessions from %d producers (%d High)\n", res.Sent, sc.Sessions, sc.Producers, highs)
	fmt.Fprintf(w, "messages delivered:           %d (lost %d)\n", res.Applied, res.Lost)
	fmt.Fprintf(w, "per-session order violations: %d\n", res.Violations)
	fmt.Fprintf(w, "duplicates applied:           %d (redeliveries recognised and skipped: %d)\n", res.Duplicates, res.Skipped)
	fmt.Fprintf(w, "early deliveries sent back:   %d (redelivered ahead of a predecessor)\n", res.Early)
	fmt.Fprintf(w, "throughput:                   %.0f msg/s (%v, first publish to last applied)\n", res.Throughput, res.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "end-to-end latency:           p50 %v, p99 %v (publish to applied)\n", res.P50.Round(time.Millisecond), res.P99.Round(time.Millisecond))
	names := make([]string, 0, len(res.Nodes))
	for name := range res.Nodes {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		st := res.Nodes[name]
		note := ""
		if name == res.Killed {
			note = " (killed)"
		}
		fmt.Fprintf(w, "  %s%s: served %d partitions, %d deliveries (%d redeliveries, %d early), %d acks lost\n",
			name, note, st.Partitions, st.Delivered, st.Redelivered, st.Early, st.AckFailed)
	}
}
