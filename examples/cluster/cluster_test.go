package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTopology has short timeouts, so that a killed node's partitions move
// within a few seconds.
func testTopology(partitions int) Topology {
	return Topology{
		Stream:        "TEST",
		Partitions:    partitions,
		AckWait:       time.Second,
		PullExpiry:    time.Second,
		PinnedTTL:     2500 * time.Millisecond,
		RetryDelay:    50 * time.Millisecond,
		MaxAckPending: 500,
	}
}

func TestKilledNodeLosesNothingAndBreaksNoOrder(t *testing.T) {
	sc := Scenario{
		Nodes: 3, Producers: 4, Sessions: 100, Messages: 20_000, HighEvery: 50, Kill: true,
		Topology: testTopology(6),
	}
	if testing.Short() {
		sc.Messages = 4_000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	res, err := Run(ctx, sc)
	require.NoError(t, err)

	assert.Equal(t, sc.Messages, res.Applied, "applied")
	assert.Zero(t, res.Lost, "lost")
	assert.Zero(t, res.Violations, "order violations")
	assert.Zero(t, res.Duplicates, "duplicates applied")
	require.NotEmpty(t, res.Killed)
	victim := res.Nodes[res.Killed]
	assert.Positive(t, victim.Partitions, "the killed node owned no partition: the test proves nothing")
	served := 0
	for name, st := range res.Nodes {
		if name != res.Killed {
			served += st.Partitions
		}
	}
	assert.Equal(t, sc.Topology.Partitions, served, "partitions the survivors served: the killed node's did not move")
	t.Logf("killed %s at %d applied; %d redeliveries skipped, %d early; nodes %+v",
		res.Killed, res.KilledAt, res.Skipped, res.Early, res.Nodes)
}

// A run that ends before the halfway kill (here: canceled once 100 messages
// are applied, as a timeout would) still reports what the stream stored and
// what the nodes applied, and counts the rest as lost.
func TestRunEndedEarlyAccountsForWhatWasApplied(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runCtx, end := context.WithCancel(ctx)
	defer end()
	sc := Scenario{
		// Half of 100,000 is far beyond what is applied by the time the
		// cancellation is seen: the kill never comes.
		Nodes: 3, Producers: 4, Sessions: 100, Messages: 100_000, HighEvery: 50, Kill: true,
		Topology: testTopology(6),
		onApplied: func(applied int) {
			if applied == 100 {
				end()
			}
		},
	}
	res, err := Run(runCtx, sc)
	require.ErrorIs(t, err, context.Canceled)
	assertAccounted(t, res, 100)
	assert.Empty(t, res.Killed, "the run ended before the kill")
	assert.Len(t, res.Nodes, 3)
}

// A producer's failure ends the run at once, with its error, and the run
// still reports what was applied.
func TestRunEndedByProducerFailureAccountsForWhatWasApplied(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fifty := make(chan struct{})
	broken := errors.New("producer-2: broker refused")
	sc := Scenario{
		Nodes: 2, Producers: 2, Sessions: 100, Messages: 100_000, Kill: true,
		Topology: testTopology(4),
		onApplied: func(applied int) {
			if applied == 50 {
				close(fifty)
			}
		},
		produce: func(ctx context.Context, url, name string, sessions []string, perSession, highEvery int) error {
			if name != "producer-2" {
				return Produce(ctx, url, name, sessions, perSession, highEvery)
			}
			select {
			case <-fifty:
				return broken
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	}
	res, err := Run(ctx, sc)
	require.ErrorIs(t, err, broken)
	assert.NotErrorIs(t, err, context.Canceled, "the producer's error, not the cancellation it caused")
	assertAccounted(t, res, 50)
	assert.Empty(t, res.Killed, "the run ended before the kill")
	assert.Len(t, res.Nodes, 2)
}

// assertAccounted checks a Result of a run that ended early with at least
// applied messages applied.
func assertAccounted(t *testing.T, res Result, applied int) {
	t.Helper()
	assert.GreaterOrEqual(t, res.Applied, applied, "applied")
	assert.GreaterOrEqual(t, res.Sent, res.Applied, "sent: what the stream stored")
	assert.Equal(t, res.Sent-res.Applied, res.Lost, "lost")
	assert.Zero(t, res.Violations, "order violations")
	assert.Zero(t, res.Duplicates, "duplicates applied")
	assert.Positive(t, res.Elapsed, "elapsed")
	assert.Positive(t, res.Throughput, "throughput")
	var delivered int64
	for _, st := range res.Nodes {
		delivered += st.Delivered
	}
	assert.GreaterOrEqual(t, delivered, int64(res.Applied), "deliveries")
	t.Logf("sent %d, applied %d, lost %d, nodes %+v", res.Sent, res.Applied, res.Lost, res.Nodes)
}

// The program exits once, from run: 2 for a bad command line, 0 for -h,
// 1 with one line on stderr for a run that fails.
func TestRunExitCodes(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"-nodes", "0"}, &out, &errOut))
	assert.Equal(t, "cluster: -nodes 0: must be 1..1000\n", errOut.String())

	out.Reset()
	errOut.Reset()
	assert.Equal(t, 0, run(context.Background(), []string{"-h"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "Usage of cluster:")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "nats://" + ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	out.Reset()
	errOut.Reset()
	assert.Equal(t, 1, run(context.Background(), []string{"-nats", url, "-timeout", "1m"}, &out, &errOut))
	assert.Equal(t, "cluster: nats: no servers available for connection\n", errOut.String())
	assert.Empty(t, out.String(), "no report for a run that never started")
}

func TestHighMessageOvertakesItsSessionsBacklog(t *testing.T) {
	url := startServer(t)
	topo := testTopology(2)
	js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, Setup(ctx, js, topo))

	store := NewStore()
	queued := make(chan Message, 16)
	node, err := StartNode(ctx, NodeConfig{
		Name: "node", URL: url, Topology: topo, Store: store,
		Preferred: []int{0, 1},
		Submitted: func(m Message) { queued <- m },
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, node.Stop(context.Background())) }()

	// Hold the session with a task we control, so that what arrives queues.
	started, release := make(chan struct{}), make(chan struct{})
	_, err = node.Scheduler().Go(ctx, "alice", func(context.Context) error {
		close(started)
		<-release
		return nil
	})
	require.NoError(t, err)
	<-started

	for i := 1; i <= 5; i++ {
		publish(t, js, "alice", i, false)
	}
	publish(t, js, "alice", 1, true)
	for range 6 {
		select {
		case <-queued:
		case <-ctx.Done():
			t.Fatal("messages not delivered")
		}
	}
	close(release)
	require.NoError(t, store.Wait(ctx, 6))

	assert.Equal(t, []string{"H1", "N1", "N2", "N3", "N4", "N5"}, store.History("alice"))
	assert.Equal(t, Record{LastNormal: 5, LastHigh: 1, Applied: 6}, store.Record("alice"))
}

func TestStoppedNodeHandsItsPartitionOverAtOnce(t *testing.T) {
	url := startServer(t)
	topo := testTopology(1)
	topo.PinnedTTL = 10 * time.Minute // without the unpin, the standby would wait this long
	js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, Setup(ctx, js, topo))

	store := NewStore()
	first, err := StartNode(ctx, NodeConfig{Name: "first", URL: url, Topology: topo, Store: store, Preferred: []int{0}})
	require.NoError(t, err)
	defer first.Kill()
	second, err := StartNode(ctx, NodeConfig{Name: "second", URL: url, Topology: topo, Store: store})
	require.NoError(t, err)
	defer func() { require.NoError(t, second.Stop(context.Background())) }()
	require.NoError(t, second.Join(ctx))

	for i := 1; i <= 3; i++ {
		publish(t, js, "bob", i, false)
	}
	require.NoError(t, store.Wait(ctx, 3))
	require.NoError(t, first.Stop(ctx))
	for i := 4; i <= 6; i++ {
		publish(t, js, "bob", i, false)
	}
	require.NoError(t, store.Wait(ctx, 6), "the standby did not take over")

	assert.Equal(t, []string{"N1", "N2", "N3", "N4", "N5", "N6"}, store.History("bob"))
	assert.Equal(t, int64(3), first.Stats().Delivered, "first node")
	assert.Equal(t, int64(3), second.Stats().Delivered, "second node")
}

func TestStoreAppliesEachMessageOnceInOrder(t *testing.T) {
	st := NewStore()
	msg := func(seq uint64, high bool) Message { return Message{Session: "s", Seq: seq, High: high} }
	assert.Equal(t, Early, st.Apply(msg(2, false)), "N2 before N1")
	assert.Equal(t, Applied, st.Apply(msg(1, true)), "H1: lanes are numbered apart")
	assert.Equal(t, Applied, st.Apply(msg(1, false)), "N1")
	assert.Equal(t, Duplicate, st.Apply(msg(1, false)), "N1 again")
	assert.Equal(t, Applied, st.Apply(msg(2, false)), "N2 after N1")
	assert.Equal(t, []string{"H1", "N1", "N2"}, st.History("s"))
	rep := st.Report()
	assert.Equal(t, Report{Applied: 3, Skipped: 1, Early: 1}, Report{Applied: rep.Applied, Skipped: rep.Skipped,
		Early: rep.Early, Violations: rep.Violations, Duplicates: rep.Duplicates})
}

// parseFlags refuses a value the run cannot use with one line on stderr
// that names the flag (main then exits 2), before any server starts.
func TestBadFlagsGiveOneLineError(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"no nodes":            {[]string{"-nodes", "0"}, "-nodes 0: must be 1..1000"},
		"too many nodes":      {[]string{"-nodes", "3000000000"}, "-nodes 3000000000: must be 1..1000"},
		"one node to kill":    {[]string{"-nodes", "1"}, "-nodes 1: must be at least 2 to kill one (or give -kill=false)"},
		"no producers":        {[]string{"-producers", "0"}, "-producers 0: must be 1..1000"},
		"too many producers":  {[]string{"-producers", "3000000000", "-sessions", "3000000000", "-messages", "3000000000"}, "-producers 3000000000: must be 1..1000"},
		"fewer sessions":      {[]string{"-sessions", "3"}, "-sessions 3: must be at least -producers (4): each producer owns its sessions"},
		"negative sessions":   {[]string{"-sessions", "-3"}, "-sessions -3: must be at least -producers (4)"},
		"no messages":         {[]string{"-messages", "0"}, "-messages 0: must be 1..10000000"},
		"too many messages":   {[]string{"-messages", "9223372036854775807", "-sessions", "1", "-producers", "1"}, "-messages 9223372036854775807: must be 1..10000000"},
		"not a multiple":      {[]string{"-messages", "1500"}, "-messages 1500: must be a multiple of -sessions (1000)"},
		"too many sessions":   {[]string{"-sessions", "3000000000"}, "-messages 100000: must be a multiple of -sessions (3000000000)"},
		"negative high-every": {[]string{"-high-every", "-5"}, "-high-every -5: must not be negative (0: none)"},
		"no partitions":       {[]string{"-partitions", "0"}, "-partitions 0: must be at least 1"},
		"too many partitions": {[]string{"-partitions", "3000000000"}, "-nodes 3 × -partitions 3000000000: more than 10000 pulls"},
		"too many pulls":      {[]string{"-nodes", "100", "-partitions", "1000"}, "-nodes 100 × -partitions 1000: more than 10000 pulls"},
		"pulls overflow int":  {[]string{"-nodes", "1000", "-partitions", "9223372036854775807"}, "-nodes 1000 × -partitions 9223372036854775807: more than 10000 pulls"},
		"zero timeout":        {[]string{"-timeout", "0s"}, "-timeout 0s: must be positive"},
		"negative timeout":    {[]string{"-timeout", "-1s"}, "-timeout -1s: must be positive"},
		"stray argument":      {[]string{"extra"}, `unexpected argument "extra" (all options are flags)`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, _, err := parseFlags(tc.args, &stderr)
			require.Error(t, err)
			msg := stderr.String()
			assert.Equal(t, 1, strings.Count(msg, "\n"), "one line: %q", msg)
			assert.True(t, strings.HasPrefix(msg, "cluster: "+tc.want), msg)
		})
	}
}

// The flags' defaults are the run the package doc describes.
func TestFlagDefaults(t *testing.T) {
	var stderr bytes.Buffer
	sc, timeout, err := parseFlags(nil, &stderr)
	require.NoError(t, err)
	assert.Empty(t, stderr.String())
	assert.Equal(t, 3*time.Minute, timeout)
	assert.Equal(t, [6]int{3, 4, 1000, 100_000, 100, 12},
		[6]int{sc.Nodes, sc.Producers, sc.Sessions, sc.Messages, sc.HighEvery, sc.Topology.Partitions})
	assert.True(t, sc.Kill)
	require.NoError(t, sc.validate())
}

// startServer starts an embedded server for the test.
func startServer(t *testing.T) string {
	t.Helper()
	srv, err := StartEmbedded(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv.ClientURL()
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// publish stores one message of session, numbered seq in its lane, and
// waits for the stream's acknowledgement.
func publish(t *testing.T, js jetstream.JetStream, session string, seq int, high bool) {
	t.Helper()
	msg := nats.NewMsg("sessions." + session)
	msg.Header.Set(HeaderSeq, strconv.Itoa(seq))
	if high {
		msg.Header.Set(HeaderPriority, "high")
	}
	_, err := js.PublishMsg(context.Background(), msg)
	require.NoError(t, err)
}
