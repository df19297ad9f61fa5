//go:build linux

package seqwatermill_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/internal/member"
	"github.com/seqsched/seqsched/seqwatermill"
)

// The fault matrix with real processes: member processes (this test
// binary, re-executed) each run a Router whose subscriber is
// watermill-nats' JetStream one, decorated, on durable consumers of a
// nats-server the test embeds (file storage, so that it can be restarted
// with its state). Members are killed (SIGKILL) and restarted, frozen
// (SIGSTOP) past the consumer's AckWait and thawed, the server is
// restarted (where the deployment allows it, see below), and handlers and
// retry backoffs run longer than the subscriber's AckWaitTimeout, while
// messages are published, malformed ones (without the key metadata, or
// with a payload the handler cannot decode) and ghosts (an earlier
// message published again) among them. Every member appends each message it applies
// to one file (one write each, before its Ack, so the file's order is the
// order of the applications), and an independent checker reads it
// afterwards:
//
//   - a key's message is applied for the first time only after every
//     earlier message of its key was applied;
//   - every message the server acked to the publisher is applied, and the
//     consumers end with nothing pending or un-acked;
//   - a message applied again (at least once: a member killed or frozen
//     between its apply and its Ack, an Ack lost in a server restart) is
//     counted, never an error.
//
// One random seed runs by default (printed with the command that replays
// its choices; the timing still varies); -seqwatermill.seeds=N runs N
// more, and each deployment's regression seeds run every time.
// scripts/faults.sh runs many.

var (
	flagSeed  = flag.Uint64("seqwatermill.seed", 0, "run the fault test with this seed only")
	flagSeeds = flag.Int("seqwatermill.seeds", 0, "run the fault test with this many random seeds more")
	flagChaos = flag.Duration("seqwatermill.chaos", 3*time.Second, "how long the fault test's faults go on, per seed")
)

// Seeds that once failed, per deployment; they run every time. Those of
// the consumer per member failed when it still killed members (a
// successor received a key's later message first, from the server).
var (
	consumerEachRegressionSeeds = []uint64{5129481471789650530, 16655329438429397339}
	sharedRegressionSeeds       = []uint64{}
)

const (
	memberEnv        = "SEQWATERMILL_TEST_MEMBER"
	faultMembers     = 3
	faultKeys        = 9
	faultAckTimeout  = 150 * time.Millisecond // watermill-nats' AckWaitTimeout in each member
	faultAckWait     = 400 * time.Millisecond // the consumer's AckWait: the server's redelivery
	faultServerLimit = 2                      // server restarts per seed, at most
)

// Each member has a durable consumer of its own, of its keys' subject,
// with MaxAckPending 20: a deployment with a process per partition. The
// subscriber sends a message it gave up on and the messages behind it
// while the handler still runs it, so the decorator alone keeps each key
// in order (a plain Router breaks it). Members are frozen, not killed,
// and the server is not restarted: after either, JetStream delivered a
// key's later message to the member before it redelivered an earlier one
// (the members' receipts show it: with a successor started AckWait+100ms
// after its predecessor's death, 3 runs in 45 failed; with server
// restarts too, 3 in 20), which no process-side code can order. The
// shared deployment below has both.
func TestFaultsMembersWithAConsumerEachKeepOrderAndLoseNothing(t *testing.T) {
	faultSeeds(t, false)
}

// All members share one durable consumer with MaxAckPending 1: the server
// hands out one message at a time, to any member, and redelivers it to
// another when its member is killed or frozen (with more, two members
// would handle one key's messages at once, which no decorator can order).
// Members are killed and restarted at once, frozen, and the server is
// restarted.
func TestFaultsMembersSharingAConsumerKeepOrderAndLoseNothing(t *testing.T) {
	faultSeeds(t, true)
}

func faultSeeds(t *testing.T, shared bool) {
	seeds := append([]uint64(nil), consumerEachRegressionSeeds...)
	if shared {
		seeds = append([]uint64(nil), sharedRegressionSeeds...)
	}
	switch {
	case *flagSeed != 0:
		seeds = []uint64{*flagSeed}
	default:
		for range 1 + *flagSeeds {
			seeds = append(seeds, rand.Uint64())
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Logf("seed %d (replay: go test -race -run '^%s$' -seqwatermill.seed=%d ./seqwatermill/)",
				seed, strings.Split(t.Name(), "/")[0], seed)
			faultRun(t, seed, shared)
		})
	}
}

// natsServer is the embedded nats-server, restartable on its port with
// its store.
type natsServer struct {
	opts *server.Options
	srv  *server.Server
}

func startFaultServer(t *testing.T) *natsServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	s := &natsServer{opts: &server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	}}
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

func (s *natsServer) start(t *testing.T) {
	t.Helper()
	srv, err := server.NewServer(s.opts)
	require.NoError(t, err)
	srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server not ready")
	s.srv = srv
}

func (s *natsServer) stop() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

func (s *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.opts.Port) }

func faultRun(t *testing.T, seed uint64, shared bool) {
	rng := rand.New(rand.NewPCG(seed, 1))
	srv := startFaultServer(t)
	reconnected := make(chan struct{}, 1)
	nc, err := nats.Connect(srv.url(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case reconnected <- struct{}{}:
			default:
			}
		}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "events", Subjects: []string{"events.*"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	consumers := make([]string, faultMembers) // each member's consumer
	for i := range consumers {
		cfg := jetstream.ConsumerConfig{
			Durable: fmt.Sprint("member-", i), FilterSubject: fmt.Sprint("events.", i),
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: faultAckWait, MaxAckPending: 20,
		}
		if shared {
			cfg.Durable, cfg.FilterSubject, cfg.MaxAckPending = "members", "", 1
		}
		consumers[i] = cfg.Durable
		_, err = js.CreateOrUpdateConsumer(ctx, "events", cfg)
		require.NoError(t, err)
	}
	pub, err := wmjs.NewPublisher(wmjs.PublisherConfig{Conn: nc, Logger: watermill.NopLogger{}})
	require.NoError(t, err)

	applied := filepath.Join(t.TempDir(), "applied")
	require.NoError(t, os.WriteFile(applied, nil, 0o600))
	var logs strings.Builder
	spawn := func(id, slot int) *member.Process {
		p, err := member.Start(memberEnv+"="+strconv.Itoa(id), "SEQWATERMILL_TEST_URL="+srv.url(),
			"SEQWATERMILL_TEST_CONSUMER="+consumers[slot],
			"SEQWATERMILL_TEST_APPLIED="+applied, "SEQWATERMILL_TEST_SEED="+strconv.FormatUint(seed+uint64(id), 10))
		require.NoError(t, err)
		return p
	}
	next := 0
	members := make([]*member.Process, faultMembers)
	for i := range members {
		next++
		members[i] = spawn(next, i)
	}
	t.Cleanup(func() {
		for _, p := range members {
			if p != nil {
				logs.WriteString(p.Kill())
			}
		}
		if t.Failed() {
			t.Logf("members' logs:\n%s", logs.String())
		}
	})

	// The publisher: each key's messages 0, 1, 2, … in order; a message is
	// published again until the server acks it (a server restart can lose
	// the PubAck of a message it stored: then it is in the stream twice,
	// and applied twice). Among them, chosen by a generator of their own
	// (so that a seed's faults are what they were before these):
	//   - malformed messages: without the key metadata (the decorator
	//     orders them together under the empty key; the checker names that
	//     key "-", and they go to one subject, so to one consumer), and
	//     with a payload the handler cannot decode (it acks them without
	//     applying, as a service drops what it cannot read; they must not
	//     stall their key);
	//   - ghosts: an earlier message of a key published again, same UUID
	//     and payload, after later ones of its key (a publisher's retry
	//     that outlived its PubAck): applied again at most, never before
	//     an earlier message, and never left un-acked.
	published := map[string]int{}
	var sent []*message.Message // the messages published, for ghosts
	odd := rand.New(rand.NewPCG(seed, 3))
	send := func(subject string, m *message.Message) {
		deadline := time.Now().Add(20 * time.Second)
		for err := pub.Publish(subject, m); err != nil; err = pub.Publish(subject, m) {
			if time.Now().After(deadline) {
				t.Fatalf("publish: %v", err)
			}
			select {
			case <-reconnected:
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	var malformed, ghosts int
	publish := func(n int) {
		for range n {
			switch r := odd.IntN(20); {
			case r == 0:
				m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(published["-"])))
				send("events.0", m)
				published["-"]++
				malformed++
			case r == 1:
				m := message.NewMessage(watermill.NewUUID(), []byte("not a number"))
				k := odd.IntN(faultKeys)
				m.Metadata.Set("key", fmt.Sprint("k", k))
				send(fmt.Sprint("events.", k%faultMembers), m)
				malformed++
			case r == 2 && len(sent) > 0:
				g := sent[odd.IntN(len(sent))]
				m := message.NewMessage(g.UUID, g.Payload)
				m.Metadata.Set("key", g.Metadata.Get("key"))
				k, _ := strconv.Atoi(strings.TrimPrefix(g.Metadata.Get("key"), "k"))
				send(fmt.Sprint("events.", k%faultMembers), m)
				ghosts++
			}
			k := rng.IntN(faultKeys)
			key, subject := fmt.Sprint("k", k), fmt.Sprint("events.", k%faultMembers)
			m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(published[key])))
			m.Metadata.Set("key", key)
			send(subject, m)
			sent = append(sent, m)
			published[key]++
		}
	}

	// The faults, each after a batch of messages, so that they meet work.
	// Where the deployment has all three kinds, each comes once first, in
	// a seeded order, so that every seed meets every kind.
	const kill, freeze, restart = 0, 1, 2
	first := rng.Perm(3)
	kills, freezes, restarts := 0, 0, 0
	end := time.Now().Add(*flagChaos)
	for round := 0; time.Now().Before(end) || (shared && round < len(first)); round++ {
		publish(5 + rng.IntN(10))
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond) // lets the members work between faults
		i := rng.IntN(len(members))
		kind := [...]int{kill, kill, kill, kill, freeze, freeze, freeze, freeze, restart, restart}[rng.IntN(10)]
		switch {
		case !shared:
			kind = freeze
		case round < len(first):
			kind = first[round]
		}
		switch {
		case kind == kill:
			logs.WriteString(members[i].Kill())
			next++
			members[i] = spawn(next, i)
			kills++
		case kind == freeze:
			members[i].Freeze()
			freezes++
			time.Sleep(faultAckWait + time.Duration(100+rng.IntN(300))*time.Millisecond) // past AckWait
			members[i].Thaw()
		case restarts < faultServerLimit:
			srv.stop()
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond) // down a while
			srv.start(t)
			restarts++
		}
	}
	publish(10)
	total := 0
	for _, n := range published {
		total += n
	}

	// Wait until every message is applied and the consumer has nothing
	// left: a state of other processes that nothing here is told of.
	deadline := time.Now().Add(60 * time.Second)
	for {
		h := readApplied(t, applied)
		var pending, unacked uint64
		for _, name := range consumers {
			c, err := js.Consumer(ctx, "events", name)
			if err != nil {
				pending++
				continue
			}
			ci, err := c.Info(ctx)
			if err != nil {
				pending++
				continue
			}
			pending, unacked = pending+ci.NumPending, unacked+uint64(ci.NumAckPending)
		}
		if h.distinct == total && pending == 0 && unacked == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %d of %d messages applied, consumer: %d pending, %d un-acked",
				h.distinct, total, pending, unacked)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Killed, not closed: watermill-nats' Close can send on the channel it
	// closes (a data race its own suite works around), which -race reports.
	for i, p := range members {
		logs.WriteString(p.Kill())
		members[i] = nil
	}

	// The checker.
	h := readApplied(t, applied)
	for _, v := range h.violations {
		t.Errorf("%s", v)
	}
	if len(h.violations) > 0 {
		b, _ := os.ReadFile(applied)
		t.Logf("applied (member key n):\n%s", b)
	}
	for key, n := range published {
		for i := range n {
			if !h.applied[key][i] {
				t.Errorf("lost: %s/%d (acked by the server to the publisher, never applied)", key, i)
			}
		}
	}
	t.Logf("%d messages over %d keys (%d malformed), %d ghosts, %d applications (%d again); %d kills, %d freezes, %d server restarts",
		total, len(published), malformed, ghosts, h.lines, h.lines-h.distinct, kills, freezes, restarts)
}

// history is what the members applied, read from their shared file in
// the order they appended it.
type history struct {
	applied    map[string]map[int]bool
	lines      int
	distinct   int
	violations []string
}

func readApplied(t *testing.T, path string) history {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	h := history{applied: map[string]map[int]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var id, n int
		var key string
		if _, err := fmt.Sscanf(sc.Text(), "%d %s %d", &id, &key, &n); err != nil {
			h.violations = append(h.violations, fmt.Sprintf("malformed line %q: %v", sc.Text(), err))
			continue
		}
		h.lines++
		if h.applied[key] == nil {
			h.applied[key] = map[int]bool{}
		}
		if h.applied[key][n] {
			continue // applied again: at least once
		}
		for i := range n {
			if !h.applied[key][i] {
				h.violations = append(h.violations, fmt.Sprintf("member %d applied %s/%d before %s/%d", id, key, n, key, i))
				break
			}
		}
		h.applied[key][n] = true
		h.distinct++
	}
	return h
}

// memberMain is a member process: a Router with the decorated
// watermill-nats subscriber on the durable consumer, until SIGTERM. Its
// handler fails some attempts (retried after a backoff, some longer than
// AckWaitTimeout), runs some calls longer than AckWaitTimeout, and
// appends each message it applies to the shared file before its Ack.
func memberMain() int {
	id := os.Getenv(memberEnv)
	seed, _ := strconv.ParseUint(os.Getenv("SEQWATERMILL_TEST_SEED"), 10, 64)
	fail := func(err error) int { fmt.Fprintf(os.Stderr, "member %s: %v\n", id, err); return 1 }
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 2))
	random := func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(n)
	}
	out, err := os.OpenFile(os.Getenv("SEQWATERMILL_TEST_APPLIED"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fail(err)
	}
	nc, err := nats.Connect(os.Getenv("SEQWATERMILL_TEST_URL"), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.RetryOnFailedConnect(true)) // the server may be restarting as the member starts
	if err != nil {
		return fail(err)
	}
	sub, err := wmjs.NewSubscriber(wmjs.SubscriberConfig{
		Conn: nc, Logger: watermill.NopLogger{}, AckWaitTimeout: faultAckTimeout,
		ResourceInitializer: func(ctx context.Context, js jetstream.JetStream, topic string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
			// The server may be restarting: look the consumer up until it
			// answers, as a deployment's restart policy would.
			deadline := time.Now().Add(30 * time.Second)
			for {
				c, err := js.Consumer(ctx, "events", os.Getenv("SEQWATERMILL_TEST_CONSUMER"))
				if err == nil || time.Now().After(deadline) {
					return c, nil, err
				}
				time.Sleep(20 * time.Millisecond)
			}
		},
	})
	if err != nil {
		return fail(err)
	}
	decorated, err := seqwatermill.NewSubscriber(receipts{sub}, seqwatermill.WithKeyMetadata("key"),
		seqwatermill.WithRetries(0, func(context.Context, *message.Message, int, error) time.Duration {
			if random(5) == 0 {
				return faultAckTimeout + time.Duration(random(100))*time.Millisecond // past the give-up
			}
			return 5 * time.Millisecond
		}),
		seqwatermill.WithLogger(watermill.NewStdLoggerWithOut(os.Stderr, false, false)))
	if err != nil {
		return fail(err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return fail(err)
	}
	router.AddConsumerHandler("apply", "events", decorated, func(m *message.Message) error {
		if _, err := strconv.Atoi(string(m.Payload)); err != nil {
			fmt.Fprintf(os.Stderr, "dropped %s: cannot decode %q\n", m.UUID, m.Payload)
			return nil // what a service cannot read, it drops: acked, not applied
		}
		key := m.Metadata.Get("key")
		if key == "" {
			key = "-" // without the key metadata: the decorator orders these under the empty key
		}
		switch r := random(100); {
		case r < 8:
			return errors.New("transient") // before applying: retried
		case r < 11, key == "-" && r < 40: // the keyless more often: so that the next is sent meanwhile
			time.Sleep(faultAckTimeout + time.Duration(random(150))*time.Millisecond) // past the give-up
		default:
			time.Sleep(time.Duration(random(3)) * time.Millisecond)
		}
		_, err := fmt.Fprintf(out, "%s %s %s\n", id, key, m.Payload)
		return err
	})
	if err := router.Run(context.Background()); err != nil { // until killed
		return fail(err)
	}
	return 0
}

// receipts logs each message the subscriber sends, in the order sent, to
// the member's output (shown when the test fails): it tells a reorder by
// the broker from one in the process.
type receipts struct{ message.Subscriber }

func (r receipts) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := r.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for m := range in {
			fmt.Fprintf(os.Stderr, "received %s %s %s\n", m.Metadata.Get("key"), m.Payload, m.UUID)
			out <- m
		}
	}()
	return out, nil
}
