package seqjetstream_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqjetstream"
)

// answers records the answers a consumer sent the server, and fails the
// test for any sent after closedAt is set.
type answers struct {
	t        *testing.T
	mu       sync.Mutex
	sent     []string // "ack 3", "nak 4", ...
	closedAt atomic.Bool
}

func (a *answers) wrap(cons jetstream.Consumer) jetstream.Consumer {
	return wrapConsumer{cons, func(m jetstream.Msg) jetstream.Msg {
		seq := seqOf(a.t, m)
		rec := func(kind string) func() bool {
			return func() bool {
				if a.closedAt.Load() {
					a.t.Errorf("%s %d sent after Close returned", kind, seq)
				}
				a.mu.Lock()
				a.sent = append(a.sent, fmt.Sprint(kind, " ", seq))
				a.mu.Unlock()
				return true
			}
		}
		return hookMsg{Msg: m, onAck: rec("ack"), onTerm: rec("term"), onNak: rec("nak"), onProgress: func() bool {
			if a.closedAt.Load() {
				a.t.Errorf("InProgress %d sent after Close returned", seq)
			}
			return true
		}}
	}}
}

func (a *answers) list() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.sent...)
}

// redelivered reports the sequences a fresh consumer of cons gets within
// 20s: only a Nak explains a redelivery that quick, for the fixtures'
// AckWait is a minute.
func redelivered(t *testing.T, f *fixture, n int) []uint64 {
	t.Helper()
	var got []uint64
	for len(got) < n {
		m, err := f.cons.Next(jetstream.FetchMaxWait(20 * time.Second))
		require.NoError(t, err, "redelivery %d of %d", len(got)+1, n)
		got = append(got, seqOf(t, m))
		require.NoError(t, m.Ack())
	}
	return got
}

func TestCloseLetsRunningHandlersFinishAndGivesBackTheRest(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{AckWait: time.Minute})
	a := &answers{t: t}
	started, release := make(chan struct{}), make(chan struct{})
	c := f.consumerOf(t, a.wrap(f.cons), func(ctx context.Context, m jetstream.Msg) error {
		if seqOf(t, m) == 1 {
			close(started)
			<-release
		}
		return nil
	})
	r := start(t, c)
	for range 3 {
		publish(t, f.js, "k.a", "x")
	}
	<-started
	eventually(t, func() bool { return c.Stats().Buffered == 3 }, "three held")

	closed := make(chan error, 1)
	go func() { closed <- r.close(t, 20*time.Second) }()
	eventually(t, func() bool { return c.Stats().GivenBack == 2 }, "the two queued given back at once")
	close(release)
	require.NoError(t, <-closed)
	a.closedAt.Store(true)
	assert.Equal(t, []string{"nak 2", "nak 3", "ack 1"}, a.list())
	assert.Equal(t, []uint64{2, 3}, sorted(redelivered(t, f, 2)), "JetStream redelivers in no set order")
}

func TestCloseAtItsDeadlineGivesBackAndSendsNothingAfter(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{AckWait: time.Minute})
	a := &answers{t: t}
	started, release, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var sawCancel atomic.Bool
	c := f.consumerOf(t, a.wrap(f.cons), func(ctx context.Context, m jetstream.Msg) error {
		defer close(returned)
		close(started)
		<-release // a handler that ignores its ctx
		sawCancel.Store(ctx.Err() != nil)
		return nil
	})
	r := start(t, c)
	publish(t, f.js, "k.a", "x")
	<-started

	assert.ErrorIs(t, r.close(t, 100*time.Millisecond), context.DeadlineExceeded)
	a.closedAt.Store(true)
	close(release)
	<-returned
	assert.True(t, sawCancel.Load(), "the handler's ctx was canceled when Close gave up")
	assert.Equal(t, []string{"nak 1"}, a.list())
	st := c.Stats()
	assert.Zero(t, st.Acked)
	assert.Equal(t, uint64(1), st.GivenBack)
	assert.Zero(t, st.Buffered)
	assert.Equal(t, []uint64{1}, redelivered(t, f, 1))
}

func TestCloseGivesBackMessagesWaitingToRetryAndTheirKeysQueue(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{AckWait: time.Minute})
	var handled atomic.Int32
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		handled.Add(1)
		if seqOf(t, m) == 2 {
			t.Errorf("message 2 ran after message 1 was given back")
		}
		return errors.New("downstream is down")
	}, seqjetstream.WithRetries(5, func(context.Context, jetstream.Msg, int, error) time.Duration { return time.Hour }))
	r := start(t, c)
	publish(t, f.js, "k.a", "1")
	publish(t, f.js, "k.a", "2") // queued behind the retrying message
	eventually(t, func() bool { st := c.Stats(); return st.Retries == 1 && st.Buffered == 2 }, "waiting to retry, one queued")
	require.NoError(t, r.close(t, 20*time.Second))
	assert.Equal(t, uint64(2), c.Stats().GivenBack)
	assert.Equal(t, int32(1), handled.Load())
	assert.Equal(t, []uint64{1, 2}, sorted(redelivered(t, f, 2)))
}

func TestCloseFromAHandlerBeginsTheCloseAndReturnsErrWouldDeadlock(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{AckWait: time.Minute})
	var c *seqjetstream.Consumer
	got := make(chan error, 1)
	c = f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		cctx, cancel := context.WithTimeout(ctx, time.Minute) // derived from the handler's: still known
		defer cancel()
		got <- c.Close(cctx)
		return nil
	})
	r := start(t, c)
	publish(t, f.js, "k.a", "x")
	err := <-got
	assert.ErrorIs(t, err, seqschedErrWouldDeadlock)
	select {
	case <-r.done: // Run ends: the close began
	case <-time.After(20 * time.Second):
		t.Fatal("Run went on after Close began")
	}
	require.NoError(t, r.err)
	require.NoError(t, c.Close(context.Background()))
	assert.Equal(t, uint64(1), c.Stats().Acked, "the handler's message, acked before the close finished")
}

// pinnedFixture is a stream with one pinned consumer "part" (PinnedTTL a
// minute, so that only a hand-over or a loss moves it within a test).
func pinnedFixture(t *testing.T) (jetstream.JetStream, jetstream.Stream, func(*testing.T) jetstream.Consumer) {
	t.Helper()
	return pinnedFixtureOf(t, func(*jetstream.ConsumerConfig) {})
}

// pinnedFixtureOf is pinnedFixture with the consumer's configuration
// changed by change first.
func pinnedFixtureOf(t *testing.T, change func(*jetstream.ConsumerConfig)) (jetstream.JetStream, jetstream.Stream, func(*testing.T) jetstream.Consumer) {
	t.Helper()
	_, js, s, consumerFor := pinnedFixtureAt(t, change)
	return js, s, consumerFor
}

// pinnedFixtureAt is pinnedFixtureOf that also returns the server's URL.
func pinnedFixtureAt(t *testing.T, change func(*jetstream.ConsumerConfig)) (string, jetstream.JetStream, jetstream.Stream, func(*testing.T) jetstream.Consumer) {
	t.Helper()
	url := startServer(t)
	_, js := connect(t, url)
	s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
	cfg := jetstream.ConsumerConfig{
		Durable: "part", AckWait: 500 * time.Millisecond, MaxAckPending: 100,
		PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: time.Minute,
	}
	change(&cfg)
	newConsumer(t, s, cfg)
	// Each instance gets its own connection, as separate processes would.
	return url, js, s, func(t *testing.T) jetstream.Consumer {
		_, ijs := connect(t, url)
		cn, err := ijs.Consumer(context.Background(), "S", "part")
		require.NoError(t, err)
		return cn
	}
}

func TestHandoverOnCloseLetsAStandbyTakeOverAtOnce(t *testing.T) {
	js, _, consumerFor := pinnedFixture(t)
	l := newLedger()
	handler := func(ctx context.Context, m jetstream.Msg) error {
		l.apply("k", seqOf(t, m))
		return nil
	}
	opts := []seqjetstream.Option{seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(500 * time.Millisecond), seqjetstream.WithHandover(js)}
	first, err := seqjetstream.NewConsumer([]jetstream.Consumer{consumerFor(t)}, handler, opts...)
	require.NoError(t, err)
	r1 := start(t, first)
	publish(t, js, "k.a", "1")
	eventually(t, func() bool { return first.Stats().Acked == 1 }, "the first instance owns the partition")

	second, err := seqjetstream.NewConsumer([]jetstream.Consumer{consumerFor(t)}, handler, opts...)
	require.NoError(t, err)
	start(t, second)
	require.NoError(t, r1.close(t, 10*time.Second))
	publish(t, js, "k.a", "2")
	eventually(t, func() bool { return second.Stats().Acked == 1 }, "the standby took over before PinnedTTL: %+v", statsOf(second))
	assert.Equal(t, []uint64{1, 2}, l.key("k"))
	assert.True(t, second.Stats().Consumers[0].Owned)
}

func TestLostPinDropsQueuedWorkAndAnswersNothingForIt(t *testing.T) {
	js, s, consumerFor := pinnedFixture(t)
	l := newLedger()
	a := &answers{t: t}
	started, release := make(chan struct{}), make(chan struct{})
	var lost atomic.Bool
	first, err := seqjetstream.NewConsumer([]jetstream.Consumer{a.wrap(consumerFor(t))}, func(ctx context.Context, m jetstream.Msg) error {
		if seqOf(t, m) == 1 {
			close(started)
			<-release
			lost.Store(ctx.Err() != nil)
			return nil // too late: the partition is another's
		}
		l.apply("k", seqOf(t, m))
		return nil
	}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300*time.Millisecond), seqjetstream.WithLogger(discard))
	require.NoError(t, err)
	start(t, first)
	for range 3 {
		publish(t, js, "k.a", "x")
	}
	<-started
	eventually(t, func() bool { return first.Stats().Buffered == 3 }, "three held by the first instance")

	// The second instance's pull waits at the server for as long as the
	// test runs: the pin goes to it, not to a new pull of the first.
	second := pinnedConsumer(t, consumerFor(t), l.applier(t), 30*time.Second)
	start(t, second)
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	eventually(t, func() bool { return info(t, probe).NumWaiting == 2 }, "both instances' pulls waiting: %d", lazy(func() any { return info(t, probe).NumWaiting }))
	// The operator (or PinnedTTL) unpins the partition; the server pins
	// it anew when it has a message to deliver, to a pull that carries no
	// pin (the second instance's), and tells the first instance's pull
	// that its pin is void.
	require.NoError(t, s.UnpinConsumer(context.Background(), "part", "g"))
	publish(t, js, "k.a", "x")
	eventually(t, func() bool { return first.Stats().Dropped == 3 }, "the first instance dropped what it held")
	close(release)
	eventually(t, func() bool { return l.count() == 4 }, "the second instance applied all four: applied %v; first %+v; second %+v",
		lazy(func() any { return l.key("k") }), statsOf(first), statsOf(second))
	assert.Equal(t, []uint64{1, 2, 3, 4}, l.key("k"), "in order, after its catch-up")
	assert.True(t, lost.Load(), "the running handler saw its ctx canceled")
	assert.Empty(t, a.list(), "the first instance answered nothing")
	st := first.Stats().Consumers[0]
	assert.False(t, st.Owned)
	assert.Zero(t, st.Acked)
	assert.True(t, second.Stats().Consumers[0].Owned, "the second instance owns the partition")
}

// With the server down, a hand-over's unpin gets no answer: Close waits
// for it a bounded time, not its whole ctx, and still finishes the close
// (the standby would take over after PinnedTTL instead).
func TestHandoverOnCloseWaitsBoundedTimeWhenTheServerIsDown(t *testing.T) {
	srv := startServerOf(t)
	_, js := connect(t, srv.ClientURL())
	s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
	cons := newConsumer(t, s, jetstream.ConsumerConfig{
		Durable: "part", AckWait: 500 * time.Millisecond, MaxAckPending: 100,
		PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: time.Minute,
	})
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, nop,
		seqjetstream.WithMaxBuffered(100), seqjetstream.WithHandover(js), seqjetstream.WithLogger(discard))
	require.NoError(t, err)
	r := start(t, c)
	publish(t, js, "k.a", "1")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "the partition owned: %+v", statsOf(c))

	srv.Shutdown()
	srv.WaitForShutdown()
	begin := time.Now()
	require.NoError(t, r.close(t, 15*time.Second))
	assert.Less(t, time.Since(begin), 3*time.Second, "Close with the server down")
}

// A handler's ctx carries its message's stream sequence and the epoch of
// the partition's owner it runs under: the delivery sequence at which the
// server pinned that owner, so each owner's is higher than the one's
// before it, whichever instance it is (see seqjetstream.Epoch).
func TestHandlersSeeTheirSequenceAndAnEpochThatGrowsWithEachOwner(t *testing.T) {
	js, _, consumerFor := pinnedFixture(t)
	type seen struct{ seq, ctxSeq, epoch uint64 }
	var mu sync.Mutex
	var got []seen
	handler := func(ctx context.Context, m jetstream.Msg) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, seen{seqOf(t, m), seqjetstream.Sequence(ctx), seqjetstream.Epoch(ctx)})
		return nil
	}
	opts := []seqjetstream.Option{seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(500 * time.Millisecond), seqjetstream.WithHandover(js)}
	first, err := seqjetstream.NewConsumer([]jetstream.Consumer{consumerFor(t)}, handler, opts...)
	require.NoError(t, err)
	r1 := start(t, first)
	publish(t, js, "k.a", "1")
	publish(t, js, "k.b", "2")
	eventually(t, func() bool { return first.Stats().Acked == 2 }, "the first instance owns the partition")

	second, err := seqjetstream.NewConsumer([]jetstream.Consumer{consumerFor(t)}, handler, opts...)
	require.NoError(t, err)
	start(t, second)
	require.NoError(t, r1.close(t, 10*time.Second))
	publish(t, js, "k.a", "3")
	eventually(t, func() bool { return second.Stats().Acked == 1 }, "the standby took over: %+v", statsOf(second))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 3)
	slices.SortFunc(got, func(a, b seen) int { return cmp.Compare(a.seq, b.seq) })
	for _, s := range got {
		assert.Equal(t, s.seq, s.ctxSeq, "Sequence(ctx) of %d", s.seq)
	}
	assert.Equal(t, uint64(1), got[0].epoch, "the first owner's epoch: pinned at the first delivery")
	assert.Equal(t, got[0].epoch, got[1].epoch, "one epoch for the first owner's messages")
	assert.Equal(t, uint64(3), got[2].epoch, "the second owner's epoch: pinned at the third delivery")
	assert.Zero(t, seqjetstream.Sequence(context.Background()))
	assert.Zero(t, seqjetstream.Epoch(context.Background()))
}

func TestPlainConsumerHandlersSeeTheirSequenceAndNoEpoch(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	type seen struct{ seq, ctxSeq, epoch uint64 }
	got := make(chan seen, 2)
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		got <- seen{seqOf(t, m), seqjetstream.Sequence(ctx), seqjetstream.Epoch(ctx)}
		return nil
	})
	start(t, c)
	publish(t, f.js, "k.a", "1")
	publish(t, f.js, "k.a", "2")
	assert.Equal(t, seen{1, 1, 0}, <-got)
	assert.Equal(t, seen{2, 2, 0}, <-got)
}

// Close with WithHandover unpins a partition only once nothing more can
// go out for it: the server then pins the standby, and redelivers to it
// what this instance held. An answer of this instance that could still
// follow the unpin (an Ack sent within its answer window, but slow on a
// loaded host) could take off the server's count a message the standby
// already holds, and end its catch-up with an earlier message of the key
// still out (issue 45). Here the old owner's handler for 1 returns as
// soon as the unpin is sent, or when its ctx ends: Close's ctx ends
// first, and Close gives 1 back, then unpins. Before the fix Close
// unpinned first, and 1 was acknowledged after the unpin. The standby
// then runs 1 and 2 in order.
func TestHandoverOnCloseUnpinsOnlyOnceNothingMoreIsSent(t *testing.T) {
	js, s, consumerFor := pinnedFixture(t) // AckWait 500ms, PinnedTTL 1m
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	var (
		mu       sync.Mutex
		events   []string // the old owner's answers for 1, and its unpin
		unpinned = make(chan struct{})
		running  = make(chan struct{})
	)
	note := func(e string) bool {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
		return true
	}
	hjs := unpinHook{js, sync.OnceFunc(func() { note("unpin"); close(unpinned) })}
	oldCons := wrapConsumer{consumerFor(t), func(m jetstream.Msg) jetstream.Msg {
		return hookMsg{Msg: m,
			onAck:  func() bool { return note("ack") },
			onTerm: func() bool { return note("term") },
			onNak:  func() bool { return note("nak") },
		}
	}}
	old, err := seqjetstream.NewConsumer([]jetstream.Consumer{oldCons}, func(ctx context.Context, m jetstream.Msg) error {
		close(running)
		select {
		case <-unpinned:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300*time.Millisecond), seqjetstream.WithHandover(hjs))
	require.NoError(t, err)
	rOld := start(t, old)
	require.Equal(t, uint64(1), publish(t, js, "k.a", "1"))
	<-running

	l := newLedger()
	c := pinnedConsumer(t, consumerFor(t), l.applier(t), 300*time.Millisecond)
	start(t, c)
	eventually(t, func() bool { return info(t, probe).NumWaiting >= 1 }, "the standby's pull waiting")

	err = rOld.close(t, time.Second)
	mu.Lock()
	assert.Equal(t, []string{"nak", "unpin"}, events, "the old owner's answers for 1 and its unpin, in order")
	mu.Unlock()
	assert.ErrorIs(t, err, context.DeadlineExceeded, "Close past its ctx, 1 still running")

	require.Equal(t, uint64(2), publish(t, js, "k.a", "2")) // pins the standby
	eventually(t, func() bool { return l.count() == 2 }, "1 and 2 applied by the standby: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Equal(t, []uint64{1, 2}, l.key("k"))
}

// An owner whose Close drains longer than PinnedTTL stops pulling, and the
// server pins a standby meanwhile; the owner does not know. Its Close must
// not unpin the standby's pin at the end (the server's unpin takes
// whatever pin is current): that ended the standby's pull, which the
// server had pinned, in a 423 and cost it its epoch (issue 45, 90ms after
// another instance's Close).
func TestCloseDoesNotUnpinAPinItLostMeanwhile(t *testing.T) {
	js, s, consumerFor := pinnedFixtureOf(t, func(cfg *jetstream.ConsumerConfig) { cfg.PinnedTTL = time.Second })
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	var unpins atomic.Int32
	running, release := make(chan struct{}), make(chan struct{})
	first, err := seqjetstream.NewConsumer([]jetstream.Consumer{consumerFor(t)}, func(ctx context.Context, m jetstream.Msg) error {
		if seqOf(t, m) == 2 {
			close(running)
			<-release
		}
		return nil
	}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300*time.Millisecond), seqjetstream.WithLogger(discard),
		seqjetstream.WithHandover(unpinHook{JetStream: js, before: func() { unpins.Add(1) }}))
	require.NoError(t, err)
	r1 := start(t, first)
	publish(t, js, "k.a", "1")
	eventually(t, func() bool { return first.Stats().Acked == 1 }, "the first instance owns the partition")
	publish(t, js, "k.a", "2")
	<-running

	var lost atomic.Int32
	second := pinnedConsumer(t, consumerFor(t), func(context.Context, jetstream.Msg) error { return nil }, 300*time.Millisecond,
		seqjetstream.WithHandover(js), seqjetstream.WithLogger(slog.New(hookHandler(func(r slog.Record) {
			if strings.HasPrefix(r.Message, "seqjetstream: partition lost") {
				lost.Add(1)
			}
		}))))
	start(t, second)
	closed := make(chan error, 1)
	go func() { closed <- r1.close(t, 10*time.Second) }()
	// The first instance pulls no more; after PinnedTTL the server pins
	// the standby's pull when it has a message to deliver.
	eventually(t, func() bool { return info(t, probe).NumWaiting == 1 }, "only the standby pulling")
	publish(t, js, "k.b", "3")
	eventually(t, func() bool { return second.Stats().Consumers[0].Owned }, "the standby pinned after PinnedTTL: %+v", statsOf(second))
	close(release)
	require.NoError(t, <-closed)
	assert.Zero(t, unpins.Load(), "unpins by the closed instance, whose pin the server had given to the standby")

	publish(t, js, "k.c", "4")
	eventually(t, func() bool { return second.Stats().Acked == 2 }, "3 and 4 acknowledged by the standby: %+v", statsOf(second))
	assert.Zero(t, lost.Load(), "epochs the standby lost")
	assert.True(t, second.Stats().Consumers[0].Owned)
}
