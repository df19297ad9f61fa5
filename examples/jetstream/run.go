package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type params struct {
	messages    int
	keys        int
	partitions  int
	instances   int
	concurrency int
	latency     time.Duration
	kill        bool
	timeout     time.Duration
}

// run is the whole program; it returns the exit code: 0 when the ordered
// run lost, reordered and duplicated nothing, 1 when it did or failed, 2
// for a bad command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var p params
	fs := flag.NewFlagSet("jetstream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&p.messages, "messages", 20000, "messages to publish")
	fs.IntVar(&p.keys, "keys", 1000, "distinct keys (zipf-skewed popularity)")
	fs.IntVar(&p.partitions, "partitions", 6, "partitions of the stream, one pinned consumer each")
	fs.IntVar(&p.instances, "instances", 3, "consumer instances in the ordered run")
	fs.IntVar(&p.concurrency, "concurrency", 64, "handlers at once per instance (and pool workers)")
	fs.DurationVar(&p.latency, "latency", 2*time.Millisecond, "handler time, from 0 up to this, the same per message in every run")
	fs.BoolVar(&p.kill, "kill", true, "kill the busiest instance halfway through the messages left after the scale-out")
	fs.DurationVar(&p.timeout, "timeout", 3*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "jetstream: unexpected argument %q (all options are flags)\n", fs.Arg(0))
		return 2
	case p.messages < 10 || p.messages > 1_000_000:
		fmt.Fprintf(stderr, "jetstream: -messages %d: must be 10..1000000\n", p.messages)
		return 2
	case p.keys < 1 || p.partitions < 1 || p.partitions > 1000 || p.concurrency < 1 || p.latency < 0 || p.timeout <= 0:
		fmt.Fprintln(stderr, "jetstream: need -keys, -concurrency >= 1, 1 <= -partitions <= 1000, -latency >= 0, -timeout > 0")
		return 2
	case p.instances < 1 || p.instances > 100 || (p.kill && p.instances < 2):
		fmt.Fprintf(stderr, "jetstream: -instances %d: must be 1..100, and at least 2 to kill one (or -kill=false)\n", p.instances)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if err := runExample(ctx, p, stdout); err != nil {
		fmt.Fprintln(stderr, "jetstream:", err)
		return 1
	}
	return 0
}

func runExample(ctx context.Context, p params, out io.Writer) error {
	srv, dir, err := startServer()
	if err != nil {
		return err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "EVENTS",
		Subjects: []string{"events.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source: "events.*", Destination: fmt.Sprintf("part.{{partition(%d,1)}}.{{wildcard(1)}}", p.partitions),
		},
		Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		return err
	}
	keys, prev := plan(p)
	fmt.Fprintf(out, "jetstream: %d messages, %d keys (zipf), %d partitions, handler 0–%v, on nats-server %s in this process\n",
		p.messages, p.keys, p.partitions, p.latency, server.VERSION)

	env := &env{p: p, url: srv.ClientURL(), js: js, stream: stream}
	ordered := newStore(prev)
	res, err := env.ordered(ctx, "ordered", p.instances, p.kill, ordered, func() error { return publish(ctx, js, keys) })
	if err != nil {
		return err
	}
	a := ordered.audit()
	lost := p.messages - a.applied
	how := fmt.Sprintf("%d instances", p.instances)
	if res.killed != "" {
		how += fmt.Sprintf(", %s killed at %d applied (it owned %d partitions)", res.killed, res.killedAt, res.killedOwned)
	}
	fmt.Fprintf(out, "seqjetstream, %s:\n", how)
	for _, l := range res.layouts {
		fmt.Fprintln(out, l)
	}
	fmt.Fprintf(out, "  lost:                %d\n", lost)
	fmt.Fprintf(out, "  order violations:    %d\n", a.disorder)
	fmt.Fprintf(out, "  duplicates applied:  %d (redeliveries skipped by the store: %d)\n", a.dups, a.skipped)
	fmt.Fprintf(out, "  stale writes fenced: %d (refused by the ownership epoch)\n", a.fenced)
	fmt.Fprintf(out, "  throughput:          %s\n", rate(p.messages, res.elapsed, "failover included"))

	solo := newStore(prev)
	soloRes, err := env.ordered(ctx, "solo", 1, false, solo, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "the same work on one instance:\n")
	fmt.Fprintf(out, "  seqjetstream, %d handlers:        %s, order violations %d\n",
		p.concurrency, rate(p.messages, soloRes.elapsed, ""), solo.audit().disorder)
	perPart := newStore(prev)
	d, err := env.perPartition(ctx, perPart)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  a consumer per partition, MaxAckPending=1: %s, order violations %d\n", rate(p.messages, d, ""), perPart.audit().disorder)
	pool := newStore(prev)
	d, err = env.pool(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  a pool of %d workers on one consumer:   %s, order violations %d\n", p.concurrency, rate(p.messages, d, ""), pool.audit().disorder)

	if lost != 0 || a.disorder != 0 || a.dups != 0 {
		return fmt.Errorf("the ordered run lost %d, reordered %d and applied %d twice", lost, a.disorder, a.dups)
	}
	return nil
}

func rate(n int, d time.Duration, note string) string {
	s := fmt.Sprintf("%6.0f msg/s (%v", float64(n)/d.Seconds(), d.Round(time.Millisecond))
	if note != "" {
		s += ", " + note
	}
	return s + ")"
}

// startServer starts a nats-server with JetStream in this process, on
// 127.0.0.1 and a free port, storing in a temporary directory.
func startServer() (*server.Server, string, error) {
	dir, err := os.MkdirTemp("", "seqsched-jetstream-example")
	if err != nil {
		return nil, "", err
	}
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		os.RemoveAll(dir)
		return nil, "", errors.New("nats-server not ready after 10s")
	}
	return srv, dir, nil
}

// publish publishes the messages, keys by zipf popularity, and returns
// each message's key predecessor: stream sequence → the previous sequence
// of its key (0 for a key's first).
// plan returns the key of each message to publish, with skewed (zipf)
// popularity, and for each stream sequence the previous sequence of its
// key (0 for a key's first): the i-th message is stored at sequence i+1
// of the fresh stream, which publish checks.
func plan(p params) (keys []string, prev map[uint64]uint64) {
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 10, uint64(p.keys-1))
	keys = make([]string, p.messages)
	prev = make(map[uint64]uint64, p.messages)
	last := make(map[string]uint64, p.keys)
	for i := range keys {
		keys[i] = fmt.Sprint("customer-", zipf.Uint64())
		seq := uint64(i + 1)
		prev[seq] = last[keys[i]]
		last[keys[i]] = seq
	}
	return keys, prev
}

// publishWindow bounds the messages published and not yet acknowledged:
// nats.go refuses a PublishAsync past its own limit (4,000 by default)
// once a wait for room runs out, so the loop waits for the oldest
// acknowledgement before it goes past this many.
const publishWindow = 1000

// publish stores one message per key, in order, and checks each was
// stored at the sequence plan gave it. At most publishWindow are
// outstanding at once.
func publish(ctx context.Context, js jetstream.JetStream, keys []string) error {
	futures := make([]jetstream.PubAckFuture, len(keys))
	acked := 0 // futures[:acked] are checked
	wait := func(i int) error {
		select {
		case ack := <-futures[i].Ok():
			if ack.Sequence != uint64(i+1) {
				return fmt.Errorf("message %d stored at sequence %d, not %d", i, ack.Sequence, i+1)
			}
			return nil
		case err := <-futures[i].Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i, k := range keys {
		for ; acked <= i-publishWindow; acked++ {
			if err := wait(acked); err != nil {
				return err
			}
		}
		f, err := js.PublishAsync("events."+k, fmt.Appendf(nil, "event %d", i))
		if err != nil {
			return err
		}
		futures[i] = f
	}
	for ; acked < len(keys); acked++ {
		if err := wait(acked); err != nil {
			return err
		}
	}
	return nil
}

// keyOf returns the key of a stored subject, part.<p>.<key>.
func keyOf(subject string) string { return subject[strings.LastIndexByte(subject, '.')+1:] }

// partOf returns the partition of a subject "part.<n>.<key>".
func partOf(subject string) string {
	rest := strings.TrimPrefix(subject, "part.")
	return rest[:strings.IndexByte(rest, '.')]
}

// work is the handler's work: the same time for a message in every run,
// from 0 up to max, derived from its sequence.
func work(ctx context.Context, seq uint64, max time.Duration) error {
	if max <= 0 {
		return nil
	}
	t := time.NewTimer(time.Duration((seq * 2654435761) % uint64(max+1)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
