package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/seqsched/seqsched/seqwatermill"
)

// oneAtATimeSample bounds the events the one-at-a-time run handles: at 1ms
// each, the whole stream would take as many seconds as it has thousands.
const oneAtATimeSample = 1000

// run is the whole program; it returns the exit code: 0 when the
// seqwatermill run handled every event with no order violation, 1 when not,
// 2 for bad flags.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watermill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	events := fs.Int("events", 10000, "events in the stream (>= accounts)")
	accounts := fs.Int("accounts", 1000, "accounts the events belong to, round robin")
	latency := fs.Duration("latency", time.Millisecond, "the handler's time per event")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up on a run after this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "watermill: unexpected argument %q (all options are flags)\n", fs.Arg(0))
		return 2
	case *accounts < 1 || *accounts > 1_000_000:
		fmt.Fprintln(stderr, "watermill: -accounts must be 1..1000000")
		return 2
	case *events < *accounts || *events > 10_000_000:
		fmt.Fprintln(stderr, "watermill: -events must be -accounts..10000000")
		return 2
	case *latency < 0 || *latency > time.Second:
		fmt.Fprintln(stderr, "watermill: -latency must be 0..1s")
		return 2
	case *timeout <= 0:
		fmt.Fprintln(stderr, "watermill: -timeout must be > 0")
		return 2
	}
	fmt.Fprintf(stdout, "watermill: %d events, %d accounts, handler %v, on gochannel\n", *events, *accounts, *latency)
	sample := min(*events, oneAtATimeSample)
	runs := []struct {
		label   string
		events  int
		ordered bool
		decor   bool
		note    string
	}{
		{"plain Router, default gochannel:", *events, false, false, "(parallel; gochannel sends each event from its own goroutine)"},
		{"plain Router, ordered gochannel:", sample, true, false, fmt.Sprintf("(one at a time; first %d events)", sample)},
		{"Router + seqwatermill, ordered gochannel:", *events, true, true, "(in order per account, accounts in parallel)"},
	}
	code := 0
	for _, r := range runs {
		res, err := route(ctx, r.events, *accounts, *latency, *timeout, r.ordered, r.decor)
		if err != nil {
			fmt.Fprintf(stderr, "watermill: %s %v\n", r.label, err)
			return 1
		}
		fmt.Fprintf(stdout, "  %-42s %7.0f events/s, order violations %d %s\n",
			r.label, float64(res.handled)/res.took.Seconds(), res.violations, r.note)
		if r.decor && (res.violations != 0 || res.handled != r.events) {
			code = 1
		}
	}
	return code
}

type result struct {
	handled, violations int
	took                time.Duration
}

// route publishes events (account i%accounts, its sequence number
// i/accounts) on a gochannel and handles them with a watermill Router,
// counting the events handled after a later one of their account.
func route(ctx context.Context, events, accounts int, latency, timeout time.Duration,
	ordered, decorate bool) (result, error) {
	bus := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: ordered}, watermill.NopLogger{})
	defer bus.Close()
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return result{}, err
	}
	if decorate {
		router.AddSubscriberDecorators(seqwatermill.Decorator( // the one line
			seqwatermill.WithKeyMetadata("account"),
			seqwatermill.WithAckOnReceive(), // gochannel holds nothing durable: ack as queued
		))
	}
	var mu sync.Mutex
	last := make([]int, accounts) // per account, the highest sequence number handled
	var res result
	all := make(chan struct{})
	router.AddConsumerHandler("ledger", "account-events", bus, func(m *message.Message) error {
		acct, _ := strconv.Atoi(m.Metadata.Get("account"))
		seq, _ := strconv.Atoi(m.Metadata.Get("seq"))
		time.Sleep(latency) // the handler's work: a database write, a call
		mu.Lock()
		defer mu.Unlock()
		if seq < last[acct] {
			res.violations++
		}
		last[acct] = max(last[acct], seq)
		if res.handled++; res.handled == events {
			close(all)
		}
		return nil
	})
	ran := make(chan error, 1)
	go func() { ran <- router.Run(ctx) }()
	<-router.Running()
	start := time.Now()
	for i := range events {
		m := message.NewMessage(watermill.NewUUID(), nil)
		m.Metadata.Set("account", strconv.Itoa(i%accounts))
		m.Metadata.Set("seq", strconv.Itoa(i/accounts+1))
		if err := bus.Publish("account-events", m); err != nil {
			return result{}, errors.Join(err, router.Close(), <-ran)
		}
	}
	select {
	case <-all:
	case <-time.After(timeout):
		err = fmt.Errorf("not all events handled in %v", timeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	took := time.Since(start)
	if err := errors.Join(err, router.Close(), <-ran); err != nil {
		return result{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	res.took = took
	return res, nil
}
