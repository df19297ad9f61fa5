package seqjetstream_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqjetstream"
)

// loseFirst is a pinned consumer whose first delivery of stream sequence
// seq is lost on its way (see wrapConsumer): the server counts it
// delivered, and redelivers it only after its AckWait, after the
// deliveries that followed it.
func loseFirst(t *testing.T, cons jetstream.Consumer, seq uint64) (jetstream.Consumer, *atomic.Bool) {
	var lost atomic.Bool
	return wrapConsumer{cons, func(m jetstream.Msg) jetstream.Msg {
		if seqOf(t, m) == seq && lost.CompareAndSwap(false, true) {
			return nil
		}
		return m
	}}, &lost
}

// A delivery lost on its way to the partition's owner comes back only
// after later messages of its key were delivered. The owner sees the gap
// in the consumer's delivery sequence and catches up again: its later
// messages wait for the lost one.
func TestDeliveryLostOnItsWayIsNotOvertakenByItsKeysLaterMessages(t *testing.T) {
	js, _, consumerFor := pinnedFixture(t) // AckWait 500ms
	cons, lost := loseFirst(t, consumerFor(t), 2)
	l := newLedger()
	c := pinnedConsumer(t, cons, l.applier(t), 300*time.Millisecond)
	start(t, c)

	publish(t, js, "k.a", "1")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "1 handled, the epoch's catch-up over: %+v", statsOf(c))
	publish(t, js, "k.a", "2") // lost on its way
	eventually(t, lost.Load, "2 delivered and lost")
	publish(t, js, "k.a", "3")

	eventually(t, func() bool { return l.count() == 3 }, "three applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Equal(t, []uint64{1, 2, 3}, l.key("k"), "in stream order")
	eventually(t, func() bool { return c.Stats().Acked == 3 }, "three acked: %+v", statsOf(c))
	st := c.Stats()
	assert.Equal(t, uint64(3), st.Received, "deliveries that arrived: 1, 3 and 2's redelivery")
	assert.Zero(t, st.Duplicates)
}

// The successor receives n+1 before the redelivery of n (a fault of
// seqwatermill's matrix): the old owner took n and died holding it, the
// partition was pinned anew, and the server delivers n+1, a first
// delivery, to the new owner at once, and n only after its AckWait. The
// new owner's catch-up holds n+1 back until n is back, and runs them in
// stream order.
func TestSuccessorReceivingTheNextMessageBeforeTheRedeliveryOfTheOneBeforeKeepsOrder(t *testing.T) {
	js, s, consumerFor := pinnedFixture(t) // AckWait 500ms, PinnedTTL 1m
	n := publish(t, js, "k.a", "n")

	// The old owner takes n, then dies: it never answers nor pulls again.
	takeOne(t, consumerFor(t))

	var mu sync.Mutex
	var delivered []uint64 // to the new owner, in the order they arrived
	cons := wrapConsumer{consumerFor(t), func(m jetstream.Msg) jetstream.Msg {
		mu.Lock()
		defer mu.Unlock()
		delivered = append(delivered, seqOf(t, m))
		return m
	}}
	l := newLedger()
	c := pinnedConsumer(t, cons, l.applier(t), 300*time.Millisecond)
	start(t, c)
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	eventually(t, func() bool { return info(t, probe).NumWaiting == 1 }, "the new owner's pull waiting")
	require.NoError(t, s.UnpinConsumer(context.Background(), "part", "g")) // the old owner's pin, as after its PinnedTTL
	next := publish(t, js, "k.a", "n+1")                                   // pins the new owner

	eventually(t, func() bool { return l.count() == 2 }, "n and n+1 applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	mu.Lock()
	assert.Equal(t, []uint64{next, n}, delivered[:2], "the fault: n+1 delivered before n's redelivery")
	mu.Unlock()
	assert.Equal(t, []uint64{n, next}, l.key("k"), "applied in stream order")
	assert.NoError(t, inOrder(l.key("k"), []uint64{n, next}))
	eventually(t, func() bool { return info(t, probe).NumAckPending == 0 }, "nothing pending")
	assert.Zero(t, c.Stats().CatchUpsAbandoned)
}

// A catch-up that cannot finish within its bound (here the old owner, a
// plain client, keeps 1 in progress for longer than that) must not run
// what it holds while a message is still out: it gives back what it
// holds and starts over, saying so at Warn, and once 1 comes back the
// key's messages run in stream order. Given up instead, it ran 2 before 1.
func TestCatchUpThatCannotFinishStartsOverAndKeepsOrder(t *testing.T) {
	c, l, rec, first, second, stop := catchingUpWhileOneIsOut(t)

	startedOver := false
	for deadline := time.After(20 * time.Second); !startedOver; {
		select {
		case r := <-rec.records:
			startedOver = r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, "seqjetstream: catch-up started over")
		case <-deadline:
			t.Fatalf("no catch-up started over: %+v", c.Stats())
		}
	}
	assert.Empty(t, l.key("k"), "nothing ran while 1 was out")
	stop() // 1 comes back after its AckWait

	appliedInOrderOnceBack(t, c, l, first, second)
}

// A catch-up starts over for as long as a message stays out: here the
// old owner, a plain client, keeps 1 in progress through three bounds.
// Nothing runs meanwhile; each start-over is counted and says how many
// times the catch-up started over and how long the partition has waited,
// at Warn for the first two and at Error from the third, so that a
// partition stalled this way is seen by metrics and logs, not only by
// its lag. Once 1 comes back the key's messages run in stream order.
func TestCatchUpThatKeepsStartingOverIsCountedAndSaysSoAtError(t *testing.T) {
	c, l, rec, first, second, stop := catchingUpWhileOneIsOut(t)

	type startOver struct {
		level    slog.Level
		restarts int64
		stalled  time.Duration
	}
	var got []startOver
	for deadline := time.After(40 * time.Second); len(got) < 3; {
		select {
		case r := <-rec.records:
			if !strings.HasPrefix(r.Message, "seqjetstream: catch-up started over") {
				continue
			}
			so := startOver{level: r.Level}
			r.Attrs(func(a slog.Attr) bool {
				switch a.Key {
				case "restarts":
					so.restarts = a.Value.Int64()
				case "stalled":
					so.stalled = a.Value.Duration()
				}
				return true
			})
			got = append(got, so)
		case <-deadline:
			t.Fatalf("start-overs logged: %+v; want 3: %+v", got, c.Stats())
		}
	}
	st := c.Stats()
	stop() // 1 comes back after its AckWait
	assert.Equal(t, uint64(3), st.CatchUpsStartedOver, "start-overs counted at the third's record")
	assert.Equal(t, uint64(3), st.Consumers[0].CatchUpsStartedOver, "start-overs counted for the partition")
	assert.Equal(t, []slog.Level{slog.LevelWarn, slog.LevelWarn, slog.LevelError},
		[]slog.Level{got[0].level, got[1].level, got[2].level}, "levels of the start-overs")
	for i, so := range got {
		assert.Equal(t, int64(i+1), so.restarts, "start-over %d: restarts", i+1)
		assert.GreaterOrEqual(t, so.stalled, time.Duration(i+1)*2*time.Second, "start-over %d: the partition waited a bound per start-over", i+1)
	}
	assert.Empty(t, l.key("k"), "nothing ran while 1 was out")

	appliedInOrderOnceBack(t, c, l, first, second)
}

// A previous owner that is not this package (here a plain client that
// took 1 and 2 and kept only 1 in progress) may answer a message the
// server has meanwhile redelivered to the new owner; this package's own
// owners withhold such answers (see stall_test.go). The new owner's
// catch-up counts that message (2) as its own and ends while 1 is still
// out: 1 comes back after 3, a later message of its key, ran. That is the
// limit the package doc names; what must not happen on top of it is that
// the key rule takes 1 for a duplicate and acknowledges it unrun. 1 was
// first delivered before this owner's pin, so the key rule leaves it be.
func TestStalledOwnersLateAnswerCostsOrderNotTheMessage(t *testing.T) {
	js, s, consumerFor := pinnedFixture(t) // AckWait 500ms
	publish(t, js, "k.a", "1")
	publish(t, js, "k.a", "2")

	// The old owner takes 1 and 2, and keeps 1 in progress until it
	// learns it lost the pin.
	b, err := consumerFor(t).Fetch(2, jetstream.FetchMaxWait(5*time.Second), jetstream.FetchPriorityGroup("g"))
	require.NoError(t, err)
	var old []jetstream.Msg
	for m := range b.Messages() {
		old = append(old, m)
	}
	require.Len(t, old, 2, "the old owner's fetch: %v", b.Error())
	stop := keepInProgress(t, old[0])

	l := newLedger()
	calls := newLedger()
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{consumerFor(t)}, func(ctx context.Context, m jetstream.Msg) error {
		calls.call(seqOf(t, m))
		l.apply("k", seqOf(t, m))
		return nil
	}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300*time.Millisecond))
	require.NoError(t, err)
	start(t, c)
	// Only the new owner pulls (the old one took its messages and pulls no
	// more), so the pin can go to no one else.
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	eventually(t, func() bool { return info(t, probe).NumWaiting == 1 }, "the new owner's pull waiting")
	require.NoError(t, s.UnpinConsumer(context.Background(), "part", "g"))
	publish(t, js, "k.a", "3") // pins the new owner, which catches up

	eventually(t, func() bool { return c.Stats().Consumers[0].Waiting == 2 }, "2 redelivered to the new owner: %+v", statsOf(c))
	require.NoError(t, old[1].DoubleAck(context.Background()), "the old owner's late answer")
	eventually(t, func() bool { return l.count() == 2 }, "the catch-up over early, 2 and 3 applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	stop() // the old owner learns it lost the pin: 1 comes back after its AckWait

	eventually(t, func() bool { return l.count() == 3 }, "1 applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Equal(t, []uint64{2, 3, 1}, l.key("k"), "the documented limit: 1 after 3")
	assert.Equal(t, 1, calls.calledFor(1), "handler calls for 1")
	eventually(t, func() bool { return info(t, probe).NumAckPending == 0 }, "nothing pending")
	st := c.Stats()
	assert.Zero(t, st.Duplicates, "duplicates")
	assert.Equal(t, uint64(3), st.Acked, "acks after a handler")
}

// hangingInfo is a consumer whose Info waits until release is closed (or
// its ctx ends), as a busy server's answer would; it counts the calls
// begun and ended.
type hangingInfo struct {
	jetstream.Consumer
	release      chan struct{}
	begun, ended atomic.Int32
}

func (h *hangingInfo) Info(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	h.begun.Add(1)
	defer h.ended.Add(1)
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.Consumer.Info(ctx)
}

// A catch-up check waits for the server's answer off the fetch goroutine:
// meanwhile the new owner goes on taking its deliveries (and keeping them
// in progress) and pulling (and keeping its pin). Were it to wait on the
// fetch goroutine, deliveries would sit untaken past their AckWait, the
// server would redeliver them, and the pin would lapse PinnedTTL after
// the last pull: a previous owner's late answers that a catch-up cannot
// count.
func TestCatchUpCheckWaitsForTheServerWithoutHoldingUpDeliveries(t *testing.T) {
	js, _, consumerFor := pinnedFixture(t) // PinnedTTL 1m
	hang := &hangingInfo{Consumer: consumerFor(t), release: make(chan struct{})}
	l := newLedger()
	c := pinnedConsumer(t, hang, l.applier(t), 10*time.Second) // checks wait up to 10s
	start(t, c)

	publish(t, js, "k.a", "1") // gains the pin: the catch-up asks for the consumer's info
	eventually(t, func() bool { return hang.begun.Load() == 1 }, "the catch-up's check asked")
	for i := 2; i <= 5; i++ {
		publish(t, js, "k.a", fmt.Sprint(i))
	}
	eventually(t, func() bool { return c.Stats().Received == 5 }, "five received: %+v", statsOf(c))
	assert.Zero(t, hang.ended.Load(), "taken while the check still waited")
	assert.Equal(t, 5, c.Stats().Consumers[0].Waiting, "held back by the catch-up")

	close(hang.release)
	eventually(t, func() bool { return l.count() == 5 }, "five applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Equal(t, []uint64{1, 2, 3, 4, 5}, l.key("k"), "in stream order")
}

// staleInfo is a consumer whose Info takes the server's answer at once
// but hands it over only once release is closed: an answer that was
// already old when it arrived, as a slow network or a busy process
// makes it.
type staleInfo struct {
	jetstream.Consumer
	release chan struct{}
	begun   atomic.Int32
}

func (s *staleInfo) Info(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	ci, err := s.Consumer.Info(ctx)
	if s.begun.Add(1) == 1 {
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return ci, err
}

// A delivery lost on its way while a catch-up's check is out: the check's
// answer, taken before the loss, knows nothing of the lost message, and
// must not end the catch-up. The gap starts the catch-up's checks over.
func TestCatchUpCheckAskedBeforeAGapDoesNotEndTheCatchUp(t *testing.T) {
	js, _, consumerFor := pinnedFixture(t) // AckWait 500ms
	lossy, lost := loseFirst(t, consumerFor(t), 2)
	stale := &staleInfo{Consumer: lossy.(wrapConsumer).Consumer, release: make(chan struct{})}
	cons := wrapConsumer{stale, lossy.(wrapConsumer).wrap}
	l := newLedger()
	c := pinnedConsumer(t, cons, l.applier(t), 300*time.Millisecond)
	start(t, c)

	publish(t, js, "k.a", "1") // gains the pin: the catch-up's first check counts 1 alone
	eventually(t, func() bool { return stale.begun.Load() == 1 }, "the catch-up's check asked")
	publish(t, js, "k.a", "2") // lost on its way
	eventually(t, lost.Load, "2 delivered and lost")
	publish(t, js, "k.a", "3") // the gap shows
	eventually(t, func() bool { return c.Stats().Received == 2 }, "1 and 3 received: %+v", statsOf(c))
	close(stale.release)

	eventually(t, func() bool { return l.count() == 3 }, "three applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Equal(t, []uint64{1, 2, 3}, l.key("k"), "in stream order")
	assert.Zero(t, c.Stats().CatchUpsAbandoned)
}

// An empty message with a Status header other than 100 (404, 408, 409,
// 503, or one nats.go does not know) makes nats.go end the pull it came
// in, at once: what the server sent to that pull after it is dropped on
// its way, and comes back after its AckWait, together with the empty
// message's own redelivery, which comes first and ends that pull too. A
// catch-up waiting for the dropped messages must not run later messages
// of their key before them, however long this goes on: the owner pulls
// one message at a time until they are back, and only gives up on what no
// pull can bring (the empty message itself, which never runs).
func TestEmptyMessagesWithStatusesThatEndAPullCostNoOrder(t *testing.T) {
	for _, status := range []string{"404", "408", "409", "503", "garbage"} {
		t.Run(status, func(t *testing.T) {
			js, _, consumerFor := pinnedFixture(t) // AckWait 500ms
			cons := newStalling(consumerFor(t))
			l := newLedger()
			c := pinnedConsumer(t, cons, func(ctx context.Context, m jetstream.Msg) error {
				l.apply(m.Subject(), seqOf(t, m))
				return nil
			}, 300*time.Millisecond, seqjetstream.WithLogger(discard))
			start(t, c)

			publish(t, js, "k.a", "1")
			eventually(t, func() bool { return c.Stats().Acked == 1 }, "1 acked, the partition owned: %+v", statsOf(c))
			cons.stall(t) // the next pull brings all of what follows at once
			publish(t, js, "k.g", "", "Status", status, "Description", "not from the server")
			var want []uint64
			for i := range 10 {
				want = append(want, publish(t, js, "k.b", fmt.Sprint(i)))
			}
			cons.unstall()
			eventually(t, func() bool { return len(l.key("k.b")) == 10 }, "ten applied: %v; %+v", lazy(func() any { return l.key("k.b") }), statsOf(c))
			for i := range 3 {
				want = append(want, publish(t, js, "k.b", fmt.Sprint(10+i)))
			}
			eventually(t, func() bool { return len(l.key("k.b")) == 13 }, "thirteen applied: %v; %+v", lazy(func() any { return l.key("k.b") }), statsOf(c))
			assert.Equal(t, want, l.key("k.b"), "in stream order")
			assert.Empty(t, l.key("k.g"), "the empty message never runs")
		})
	}
}

// catchingUpWhileOneIsOut starts a new owner (its log records in rec)
// whose catch-up holds 2 while 1 (key k.a) is out with the old owner, a
// plain client that keeps 1 in progress until stop: past the catch-up's
// bound, so that it starts over.
func catchingUpWhileOneIsOut(t *testing.T) (c *seqjetstream.Consumer, l *ledger, rec recordingHandler, first, second uint64, stop func()) {
	t.Helper()
	rec = recordingHandler{records: make(chan slog.Record, 256)}
	c, l, first, second, stop = catchingUpThrough(t, func(cons jetstream.Consumer) jetstream.Consumer { return cons }, rec)
	return c, l, rec, first, second, stop
}

// catchingUpThrough is catchingUpWhileOneIsOut with the new owner's
// consumer wrapped by wrap, and log as its logger.
func catchingUpThrough(t *testing.T, wrap func(jetstream.Consumer) jetstream.Consumer, log slog.Handler) (c *seqjetstream.Consumer, l *ledger, first, second uint64, stop func()) {
	t.Helper()
	js, s, consumerFor := pinnedFixture(t) // AckWait 500ms: a catch-up's bound is 2s
	first, stop = heldByAPlainClient(t, js, consumerFor)
	l = newLedger()
	c = pinnedConsumer(t, wrap(consumerFor(t)), l.applier(t), 300*time.Millisecond, seqjetstream.WithLogger(slog.New(log)))
	start(t, c)
	second = pinTheNewOwner(t, js, s)
	return c, l, first, second, stop
}

// startedOver waits for rec's first "catch-up started over" record.
func startedOver(t *testing.T, rec recordingHandler, c *seqjetstream.Consumer) {
	t.Helper()
	for deadline := time.After(20 * time.Second); ; {
		select {
		case r := <-rec.records:
			if r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, "seqjetstream: catch-up started over") {
				return
			}
		case <-deadline:
			t.Fatalf("no catch-up started over: %+v", c.Stats())
		}
	}
}

// appliedInOrderOnceBack waits for 1 and 2 to be applied, once 1 is back,
// and checks that they ran in stream order with no catch-up given up.
func appliedInOrderOnceBack(t *testing.T, c *seqjetstream.Consumer, l *ledger, first, second uint64) {
	t.Helper()
	eventually(t, func() bool { return l.count() == 2 }, "1 and 2 applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Equal(t, []uint64{first, second}, l.key("k"), "in stream order")
	assert.Zero(t, c.Stats().CatchUpsAbandoned)
}

// heldByAPlainClient publishes 1 (key k.a) and lets a plain client, not
// this package, take it and keep it in progress until stop: an old owner
// that holds a message past any catch-up's bound. It returns 1's stream
// sequence.
func heldByAPlainClient(t *testing.T, js jetstream.JetStream, consumerFor func(*testing.T) jetstream.Consumer) (first uint64, stop func()) {
	t.Helper()
	first = publish(t, js, "k.a", "1")
	return first, keepInProgress(t, takeOne(t, consumerFor(t)))
}

// takeOne fetches one message from cons in priority group g, as an old
// owner that is not this package: the message is in its hands, and the
// server pins it until it is unpinned.
func takeOne(t *testing.T, cons jetstream.Consumer) jetstream.Msg {
	t.Helper()
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second), jetstream.FetchPriorityGroup("g"))
	require.NoError(t, err)
	var got []jetstream.Msg
	for m := range b.Messages() {
		got = append(got, m)
	}
	require.Len(t, got, 1, "the old owner's fetch: %v", b.Error())
	return got[0]
}

// pinTheNewOwner waits for the new owner's pull, unpins the old owner (as
// after its PinnedTTL) and publishes 2 (key k.a), which pins the new
// owner: it catches up. It returns 2's stream sequence.
func pinTheNewOwner(t *testing.T, js jetstream.JetStream, s jetstream.Stream) (second uint64) {
	t.Helper()
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	eventually(t, func() bool { return info(t, probe).NumWaiting == 1 }, "the new owner's pull waiting")
	require.NoError(t, s.UnpinConsumer(context.Background(), "part", "g"))
	return publish(t, js, "k.a", "2")
}

// keepInProgress sends InProgress for m every 100ms, as a client that holds
// it does, until stop is called or the test ends.
func keepInProgress(t *testing.T, m jetstream.Msg) (stop func()) {
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				_ = m.InProgress()
			}
		}
	}()
	stop = sync.OnceFunc(func() {
		close(quit)
		<-stopped
	})
	t.Cleanup(stop)
	return stop
}

// An owner's answer that it sent within the message's answer window may
// still reach the server after the AckWait, on a loaded host: the server
// has redelivered the message to the owner by then, and drops it from its
// count when the answer lands. If that redelivery arrives while the owner
// stalls (its answer window gone), the owner must not count the message
// as its own in a later catch-up, as one whose answer it withheld: the
// server no longer counts it, and the catch-up would end with a real
// message still out. Here 1's Ack is held back until its redelivery is
// under way, that redelivery is dispatched after a stall, and then 2's
// first delivery is lost on its way: 3 must wait for 2's redelivery.
func TestOwnAnswerThatArrivedLateIsNotCountedByALaterCatchUp(t *testing.T) {
	js, s, consumerFor := pinnedFixture(t) // AckWait 500ms
	var (
		lateAck = make(chan jetstream.Msg, 1) // 1's first delivery, its Ack held back
		lost2   atomic.Bool
		undo    []func()
		undoMu  sync.Mutex
	)
	t.Cleanup(func() {
		undoMu.Lock()
		defer undoMu.Unlock()
		for _, u := range undo {
			u()
		}
	})
	cons := wrapConsumer{consumerFor(t), func(m jetstream.Msg) jetstream.Msg {
		meta, err := m.Metadata()
		require.NoError(t, err)
		switch seq, n := meta.Sequence.Stream, meta.NumDelivered; {
		case seq == 1 && n == 1:
			return hookMsg{Msg: m, onAck: func() bool { lateAck <- m; return false }}
		case seq == 1 && n == 2:
			// The owner's Ack of the first delivery lands now, after
			// the server redelivered 1; the owner stalled meanwhile.
			require.NoError(t, (<-lateAck).Ack())
			undoMu.Lock()
			undo = append(undo, seqjetstream.AdvanceClock(time.Second))
			undoMu.Unlock()
		case seq == 2 && lost2.CompareAndSwap(false, true):
			return nil // lost on its way
		}
		return m
	}}
	l := newLedger()
	c := pinnedConsumer(t, cons, l.applier(t), 300*time.Millisecond)
	start(t, c)
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)

	publish(t, js, "k.a", "1")
	eventually(t, func() bool { return c.Stats().Dropped == 1 }, "1's redelivery dispatched past its answer window: %+v", statsOf(c))
	eventually(t, func() bool { return info(t, probe).NumAckPending == 0 }, "1's late Ack landed")
	publish(t, js, "k.a", "2")
	eventually(t, lost2.Load, "2 delivered and lost")
	publish(t, js, "k.a", "3")

	eventually(t, func() bool { return l.count() == 3 }, "three applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Equal(t, []uint64{1, 2, 3}, l.key("k"), "in stream order")
}

// A catch-up that starts over keeps what it holds: those messages came
// once, the server still counts them as this owner's, and they need not
// come again. Here every redelivery of 2 is lost on its way, as a loaded
// host's pulls lose deliveries (nats.go drops what reaches a pull it
// ended from this side). The catch-up ends as soon as 1 is back, and
// runs 1 and 2 in stream order. A catch-up that gave 2 back when it
// started over waited for a redelivery of 2 for ever, starting over
// every 2s (issue 45).
func TestCatchUpThatStartsOverKeepsWhatItHolds(t *testing.T) {
	var second atomic.Uint64
	var lost atomic.Int32
	rec := recordingHandler{records: make(chan slog.Record, 256)}
	c, l, first, sec, stop := catchingUpThrough(t, func(cons jetstream.Consumer) jetstream.Consumer {
		return wrapConsumer{cons, func(m jetstream.Msg) jetstream.Msg {
			meta, err := m.Metadata()
			if err == nil && meta.Sequence.Stream == second.Load() && meta.NumDelivered > 1 {
				lost.Add(1)
				return nil
			}
			return m
		}}
	}, rec)
	second.Store(sec)

	startedOver(t, rec, c)
	assert.Empty(t, l.key("k"), "nothing ran while 1 was out")
	stop() // 1 comes back after its AckWait

	eventually(t, func() bool { return l.count() == 2 }, "1 and 2 applied: %v; %d redeliveries of 2 lost; %+v",
		lazy(func() any { return l.key("k") }), lazy(func() any { return lost.Load() }), statsOf(c))
	assert.Equal(t, []uint64{first, sec}, l.key("k"), "in stream order")
	assert.Zero(t, c.Stats().CatchUpsAbandoned)
}

// A catch-up that starts over pulls for everything the server may send
// at once (MaxAckPending), not one message at a time, whatever it holds:
// the server redelivers what it waits for behind the redeliveries of what
// it holds (when a stall kept their InProgress back), and pulls of one
// message each took every turn on a loaded host (issue 45). What it holds
// takes no room in a pull: the server sends no more new messages than
// MaxAckPending less the unacknowledged ones, held ones included.
func TestCatchUpThatStartsOverPullsInFull(t *testing.T) {
	var mu sync.Mutex
	var sizes []int // each pull's batch, in order
	at := -1        // how many pulls were made when the catch-up started over
	log := hookHandler(func(r slog.Record) {
		if strings.HasPrefix(r.Message, "seqjetstream: catch-up started over") {
			mu.Lock()
			if at < 0 {
				at = len(sizes)
			}
			mu.Unlock()
		}
	})
	c, l, _, _, stop := catchingUpThrough(t, func(cons jetstream.Consumer) jetstream.Consumer {
		return sizingConsumer{cons, func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }}
	}, log)
	defer stop()

	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return at >= 0 && len(sizes) > at }, "a pull after the catch-up started over: %+v", statsOf(c))
	mu.Lock()
	before, after := sizes[at-1], sizes[at]
	mu.Unlock()
	assert.Equal(t, 1, before, "the pull before it started over, half way through its bound: one message")
	assert.Equal(t, 100, after, "the first pull after it started over: MaxAckPending, though it holds 2")
	assert.Empty(t, l.key("k"), "nothing ran while 1 was out")
}

// sizingConsumer reports each pull's batch size to size.
type sizingConsumer struct {
	jetstream.Consumer
	size func(n int)
}

func (s sizingConsumer) Fetch(n int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	s.size(n)
	return s.Consumer.Fetch(n, opts...)
}

// hookHandler is a slog handler that calls itself with every record, on
// the goroutine that logs it.
type hookHandler func(slog.Record)

func (h hookHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h hookHandler) Handle(_ context.Context, r slog.Record) error {
	h(r)
	return nil
}
func (h hookHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h hookHandler) WithGroup(string) slog.Handler      { return h }

// A pull that this instance ended itself (its backstop, on a host too
// loaded for the server's end to come in time) may still be held by the
// server, when its request reached the server late: the server then
// shares its deliveries between that pull and the next, and what it sends
// the dead one is lost on its way, after deliveries this instance took
// from the next. Such a gap is no evidence of a stored status message that
// nats.go swallowed: the messages come again after their AckWait. Here 1
// (k.a) is out with the old owner past the catch-up's bound, and the dead
// pull loses one message (of k.b) on each side of one the next pull
// brings (of k.c). The catch-up must start over, not give up on 1 as a
// status message and run 2 before it.
func TestDeliveriesLostToAPullThisInstanceEndedDoNotGiveACatchUpUp(t *testing.T) {
	var dead *deadPull
	rec := recordingHandler{records: make(chan slog.Record, 256)}
	js, s, consumerFor := pinnedFixture(t) // AckWait 500ms: a catch-up's bound is 2s
	first, stop := heldByAPlainClient(t, js, consumerFor)
	dead = newDeadPull(consumerFor(t))
	l := newLedger()
	c := pinnedConsumer(t, dead, func(ctx context.Context, m jetstream.Msg) error {
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	}, 300*time.Millisecond, seqjetstream.WithLogger(slog.New(rec)))
	start(t, c)
	second := pinTheNewOwner(t, js, s) // the new owner catches up, holding 2, missing 1
	eventually(t, func() bool { return c.Stats().Consumers[0].Waiting == 1 }, "2 held by the catch-up: %+v", statsOf(c))

	dead.arm(t)
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	eventually(t, func() bool { return info(t, probe).NumWaiting == 2 }, "the dead pull and the next both waiting at the server")
	var b, cc []uint64
	for i := range 2 {
		b = append(b, publish(t, js, "k.b", fmt.Sprint(i))) // to the dead pull: lost
		cc = append(cc, publish(t, js, "k.c", fmt.Sprint(i)))
	}
	dead.wait(t)
	assert.Equal(t, int32(2), dead.lost.Load(), "deliveries lost to the dead pull")

	// The catch-up's bound ends with 1 still out; what it does then is
	// the test.
	ended := boundEnded(t, rec, c)
	stop() // 1 comes back after its AckWait
	ranInStreamOrder(t, c, l, ended, map[string][]uint64{"k.a": {first, second}, "k.b": b, "k.c": cc})
}

// boundEnded waits for the first of rec's records that says a catch-up
// started over or was given up, and returns its message.
func boundEnded(t *testing.T, rec recordingHandler, c *seqjetstream.Consumer) string {
	t.Helper()
	for deadline := time.After(30 * time.Second); ; {
		select {
		case r := <-rec.records:
			if strings.HasPrefix(r.Message, "seqjetstream: catch-up started over") || strings.HasPrefix(r.Message, "seqjetstream: catch-up given up") {
				return r.Message
			}
		case <-deadline:
			t.Fatalf("the catch-up neither started over nor gave up: %+v", c.Stats())
		}
	}
}

// ranInStreamOrder waits until l holds as many applications as want, and
// checks that each key of want ran in that order and that no catch-up
// was given up (ended: how the catch-up's bound ended).
func ranInStreamOrder(t *testing.T, c *seqjetstream.Consumer, l *ledger, ended string, want map[string][]uint64) {
	t.Helper()
	n := 0
	for _, seqs := range want {
		n += len(seqs)
	}
	eventually(t, func() bool { return l.count() == n }, "%d applied: %v; %+v", n, lazy(func() any {
		got := map[string][]uint64{}
		for k := range want {
			got[k] = l.key(k)
		}
		return got
	}), statsOf(c))
	for k, seqs := range want {
		assert.Equal(t, seqs, l.key(k), "%s in stream order", k)
	}
	assert.Zero(t, c.Stats().CatchUpsAbandoned, "catch-ups given up (%q)", ended)
}

// deadPull is a pinned consumer whose next pull, once armed, ends at once
// at this instance with context.DeadlineExceeded, as its backstop ends it,
// while the server goes on holding its request (for two messages): what
// the server sends it is lost on its way. The pull after it (also for two
// messages) is sent at once, so that the server holds both and shares
// what it delivers between them, the dead one first. Other pulls pass
// through.
type deadPull struct {
	jetstream.Consumer
	armed    atomic.Int32 // 1: the next pull is the dead one; 2: the one after it
	lost     atomic.Int32
	drained  chan struct{} // closed once the dead pull's request is done at the server
	bothSent chan struct{}
}

func newDeadPull(cons jetstream.Consumer) *deadPull {
	return &deadPull{Consumer: cons, drained: make(chan struct{}), bothSent: make(chan struct{})}
}

// arm makes the next pull the dead one, and waits for it and the next
// to be sent.
func (d *deadPull) arm(t *testing.T) {
	t.Helper()
	d.armed.Store(1)
	select {
	case <-d.bothSent:
	case <-time.After(20 * time.Second):
		t.Fatal("the dead pull and the next were not sent")
	}
}

// wait waits until the server is done with the dead pull's request.
func (d *deadPull) wait(t *testing.T) {
	t.Helper()
	select {
	case <-d.drained:
	case <-time.After(20 * time.Second):
		t.Fatal("the dead pull's request did not end at the server")
	}
}

func (d *deadPull) Fetch(n int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	switch {
	case d.armed.CompareAndSwap(1, 2):
		b, err := d.Consumer.Fetch(2, jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup("g"))
		if err != nil {
			return nil, err
		}
		go func() { // ends with the request, at its count or its expiry
			defer close(d.drained)
			for range b.Messages() {
				d.lost.Add(1)
			}
		}()
		out := make(chan jetstream.Msg)
		close(out)
		return endedBatch{out, context.DeadlineExceeded}, nil
	case d.armed.CompareAndSwap(2, 3):
		b, err := d.Consumer.Fetch(2, jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup("g"))
		close(d.bothSent)
		return b, err
	}
	return d.Consumer.Fetch(n, opts...)
}

// endedBatch is a pull that ended at this instance with err.
type endedBatch struct {
	msgs chan jetstream.Msg
	err  error
}

func (b endedBatch) Messages() <-chan jetstream.Msg { return b.msgs }
func (b endedBatch) Error() error                   { return b.err }

// A catch-up that starts over keeps what it holds and counts it, for the
// server counts it too; but the server gives a message up at its last
// delivery under MaxDeliver when it is given back, or its AckWait runs
// out, and counts it no more. Here (MaxDeliver 2) 2 comes again (given
// back by a start-over, or its AckWait run out on a loaded host), its
// last delivery; a later start-over that gave it back (or let its
// AckWait run out) made the server give 2 up, and the catch-up, still
// counting 2 as its own, ended with 1 out and ran 2 first. 2 must run
// after 1.
func TestCatchUpThatStartsOverDoesNotCountAMessageTheServerGaveUp(t *testing.T) {
	js, s, consumerFor := pinnedFixtureOf(t, func(cfg *jetstream.ConsumerConfig) { cfg.MaxDeliver = 2 })
	first, stop := heldByAPlainClient(t, js, consumerFor)
	var c *seqjetstream.Consumer
	var second atomic.Uint64
	lastAt := make(chan uint64, 1) // the start-overs counted when 2's last delivery came
	cons := wrapConsumer{consumerFor(t), func(m jetstream.Msg) jetstream.Msg {
		if meta, err := m.Metadata(); err == nil && meta.Sequence.Stream == second.Load() && meta.NumDelivered == 2 {
			lastAt <- c.Stats().CatchUpsStartedOver
		}
		return m
	}}
	l := newLedger()
	c = pinnedConsumer(t, cons, l.applier(t), 300*time.Millisecond, seqjetstream.WithLogger(discard))
	start(t, c)
	second.Store(pinTheNewOwner(t, js, s))

	var at uint64
	select {
	case at = <-lastAt:
	case <-time.After(20 * time.Second):
		t.Fatalf("2 not delivered again: %+v", c.Stats())
	}
	eventually(t, func() bool { return l.count() > 0 || c.Stats().CatchUpsStartedOver > at },
		"a start-over after 2's last delivery, or the catch-up over: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Empty(t, l.key("k"), "nothing ran while 1 was out")
	stop() // 1 comes back after its AckWait

	appliedInOrderOnceBack(t, c, l, first, second.Load())
}

// A standby's pull, sent without a pin, is the one the server pins when
// the owner's pin goes: it writes the new pin into that waiting request
// and delivers to it. If the pin then moves again while the request still
// waits (unpinned by another instance's Close that no longer held it, or
// its PinnedTTL), the server answers that request, sent without a pin,
// with a 423. That 423 is the server's: the partition is another client's
// now, and nothing more of this epoch may run. Taken for a stored status
// message, the instance went on under the other client's pin, counted one
// message as out of reach, and its catch-up ended one short: a later
// message of a key ran before an earlier one still out (issue 45, seed
// 2823274999529456777). Here 1 (k.a) is out with the old owner, the new
// owner's pull (held at the server, as on a loaded host) takes 2 (k.a)
// under the new pin, the pin is unpinned and another client's pull takes
// 3 (k.b) under the next one: 2 must not run before 1.
func TestServers423ToAPullSentWithoutAPinEndsTheEpoch(t *testing.T) {
	js, s, consumerFor := pinnedFixtureOf(t, func(cfg *jetstream.ConsumerConfig) { cfg.PinnedTTL = 2 * time.Second })
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	first, stop := heldByAPlainClient(t, js, consumerFor)

	rec := recordingHandler{records: make(chan slog.Record, 256)}
	var takenForStored, lost atomic.Bool
	log := hookHandler(func(r slog.Record) {
		switch {
		case strings.Contains(r.Message, "Status 423 header made nats.go forget this instance's pin"):
			takenForStored.Store(true)
		case strings.HasPrefix(r.Message, "seqjetstream: partition lost"):
			lost.Store(true)
		}
		_ = rec.Handle(context.Background(), r)
	})
	l := newLedger()
	applied := make(chan struct{}, 1)
	held := &heldPull{Consumer: consumerFor(t)}
	held.armed.Store(true) // the new owner's first pull stays at the server
	c := pinnedConsumer(t, held, func(ctx context.Context, m jetstream.Msg) error {
		l.apply(m.Subject(), seqOf(t, m))
		select {
		case applied <- struct{}{}:
		default:
		}
		return nil
	}, 300*time.Millisecond, seqjetstream.WithHandover(js), seqjetstream.WithLogger(slog.New(log)))
	start(t, c)
	second := pinTheNewOwner(t, js, s)
	eventually(t, func() bool { return c.Stats().Received == 1 }, "2 delivered to the new owner under its pin: %+v", statsOf(c))
	require.Equal(t, 1, info(t, probe).NumWaiting, "the new owner's pull, sent without a pin, still waits at the server")

	// Another client's pull (without a pin) waits too; the pin is
	// unpinned, as by an instance whose Close still thought it held it;
	// 3 pins the other client, and 4 finds the new owner's pull under a
	// pin that is no longer the server's, if 3 did not.
	other := consumerFor(t)
	taken := make(chan []jetstream.Msg, 1)
	go func() {
		b, err := other.Fetch(1, jetstream.FetchMaxWait(5*time.Second), jetstream.FetchPriorityGroup("g"))
		var got []jetstream.Msg
		if err == nil {
			for m := range b.Messages() {
				got = append(got, m)
			}
		}
		taken <- got
	}()
	eventually(t, func() bool { return info(t, probe).NumWaiting == 2 }, "the other client's pull waiting: %+v %v", lazy(func() any { return info(t, probe) }), lazy(func() any { return c.Stats() }))
	require.NoError(t, s.UnpinConsumer(context.Background(), "part", "g"))
	third := publish(t, js, "k.b", "3")
	require.Len(t, <-taken, 1, "the other client took 3 under the next pin")
	publish(t, js, "k.c", "4")

	// The new owner gets the partition again once the other client's pin
	// lapses; its catch-up must wait for 1, which the old owner holds.
	// Whichever comes first, 2 applied or a catch-up that starts over,
	// the old owner lets 1 go.
	for deadline, done := time.After(30*time.Second), false; !done; {
		select {
		case r := <-rec.records:
			done = strings.HasPrefix(r.Message, "seqjetstream: catch-up started over")
		case <-applied:
			done = true
		case <-deadline:
			t.Fatalf("neither applied nor started over: %+v", c.Stats())
		}
	}
	stop()
	eventually(t, func() bool { return len(l.key("k.a")) == 2 && len(l.key("k.b")) == 1 }, "1, 2 and 3 applied: %v %v; %+v",
		lazy(func() any { return l.key("k.a") }), lazy(func() any { return l.key("k.b") }), statsOf(c))
	assert.Equal(t, []uint64{first, second}, l.key("k.a"), "in stream order")
	assert.Equal(t, []uint64{third}, l.key("k.b"))
	assert.Zero(t, c.Stats().CatchUpsAbandoned)
	assert.False(t, takenForStored.Load(), "the server's 423 taken for a stored status message")
	assert.True(t, lost.Load(), "the epoch ended at the server's 423")
}

// heldPull is a consumer whose next pull, once armed, asks the server to
// hold it for 20s whatever the package asked: a pull the server still
// holds when the pin moves, as on a host too loaded for its pulls to end
// in time. With batch set, it asks for that many messages.
type heldPull struct {
	jetstream.Consumer
	armed atomic.Bool
	batch int
}

func (h *heldPull) Fetch(n int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	if h.armed.CompareAndSwap(true, false) {
		if h.batch > 0 {
			n = h.batch
		}
		return h.Consumer.Fetch(n, jetstream.FetchMaxWait(20*time.Second), jetstream.FetchPriorityGroup("g"))
	}
	return h.Consumer.Fetch(n, opts...)
}

// loseFirstOf is a pinned consumer whose first delivery of a message on
// subject is lost on its way (see loseFirst).
func loseFirstOf(cons jetstream.Consumer, subject string) (jetstream.Consumer, *atomic.Bool) {
	var lost atomic.Bool
	return wrapConsumer{cons, func(m jetstream.Msg) jetstream.Msg {
		if m.Subject() == subject && lost.CompareAndSwap(false, true) {
			return nil
		}
		return m
	}}, &lost
}

// oneLostThenTheNext publishes 1 (k.a), whose first delivery to c is lost
// on its way (lost says when), then 2 (k.a), and checks that c applies
// them to l in stream order.
func oneLostThenTheNext(t *testing.T, js jetstream.JetStream, c *seqjetstream.Consumer, l *ledger, lost *atomic.Bool) {
	t.Helper()
	first := publish(t, js, "k.a", "1")
	eventually(t, lost.Load, "1 delivered and lost")
	second := publish(t, js, "k.a", "2")
	eventually(t, func() bool { return len(l.key("k.a")) == 2 }, "1 and 2 applied: %v; %+v", lazy(func() any { return l.key("k.a") }), statsOf(c))
	assert.Equal(t, []uint64{first, second}, l.key("k.a"), "in stream order")
}

// A stored empty message with Status 423 that the owner proved out of
// its reach (the server still pinned it at the 423, and counts the
// message unacknowledged) leaves the server's count once the server gives
// it up at MaxDeliver, an AckWait after its last delivery. The owner
// counted it out of reach for the rest of the epoch: a later catch-up,
// for a real message lost on its way while the status message was gone
// from the count, found the server counting one message more than it
// held, took it for the status message, and ran the lost message's key's
// later message first (issue 45). Here (MaxDeliver 2, AckWait 2s) the
// status message comes twice, each time the owner unpins and a message of
// k.x pins it anew; once the server has given it up, 1 (k.a) is lost on
// its way and 2 (k.a) comes: 2 must run after 1.
func TestStatusMessageTheServerGaveUpIsNotCountedOutOfReachByALaterCatchUp(t *testing.T) {
	js, s, consumerFor := pinnedFixtureOf(t, func(cfg *jetstream.ConsumerConfig) {
		cfg.AckWait, cfg.MaxDeliver = 2*time.Second, 2
	})
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	forgot := make(chan struct{}, 8)
	log := hookHandler(func(r slog.Record) {
		if strings.Contains(r.Message, "Status 423 header made nats.go forget this instance's pin") {
			forgot <- struct{}{}
		}
	})
	cons, lost := loseFirstOf(consumerFor(t), "k.a") // 1's first delivery
	l := newLedger()
	var pendingAtLast atomic.Int64 // the server's count while the message after the last 423 runs
	c := pinnedConsumer(t, cons, func(ctx context.Context, m jetstream.Msg) error {
		if m.Subject() == "k.x" && string(m.Data()) == "1" {
			pendingAtLast.Store(int64(info(t, probe).NumAckPending))
		}
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	}, 300*time.Millisecond, seqjetstream.WithHandover(js), seqjetstream.WithLogger(slog.New(log)))
	start(t, c)
	publish(t, js, "k.b", "0")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "0 acked, the partition owned: %+v", statsOf(c))

	publish(t, js, "k.g", "", "Status", "423", "Description", "not from the server")
	for i := range 2 { // its two deliveries
		select {
		case <-forgot:
		case <-time.After(20 * time.Second):
			t.Fatalf("delivery %d of the status message not seen: %+v", i+1, c.Stats())
		}
		publish(t, js, "k.x", fmt.Sprint(i)) // pins the owner anew
		eventually(t, func() bool { return len(l.key("k.x")) == i+1 }, "k.x %d applied: %v; %+v", i, lazy(func() any { return l.key("k.x") }), statsOf(c))
	}
	// Counted still when the catch-up after its last delivery ended (the
	// case of the issue; otherwise that catch-up saw it gone already).
	t.Logf("unacknowledged at the server while k.x 1 ran: %d (2: the status message still counted)", pendingAtLast.Load())
	eventually(t, func() bool { return info(t, probe).NumAckPending == 0 }, "the status message given up at MaxDeliver: %+v", lazy(func() any { return info(t, probe) }))

	oneLostThenTheNext(t, js, c, l, lost)
	assert.Empty(t, l.key("k.g"), "the status message never runs")
	assert.Zero(t, c.Stats().CatchUpsAbandoned)
}

// The same holds for a stored status message that a catch-up was given
// up for (Status 100: nats.go drops it and goes on, and the owner sees a
// gap in the delivery sequence each time it comes): counted out of reach
// for the rest of the epoch, it let a later catch-up end with a real
// message out once the server had given it up. Here (MaxDeliver 8,
// AckWait 1s: the server counts it for about nine seconds, past the
// catch-up's bound of four) 1 (k.a) is lost on its way after that, and 2
// (k.a) comes: 2 must run after 1.
func TestStatusMessageACatchUpWasGivenUpForIsNotCountedOnceTheServerGaveItUp(t *testing.T) {
	js, s, consumerFor := pinnedFixtureOf(t, func(cfg *jetstream.ConsumerConfig) {
		cfg.AckWait, cfg.MaxDeliver = time.Second, 8
	})
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	cons, lost := loseFirstOf(consumerFor(t), "k.a") // 1's first delivery
	l := newLedger()
	c := pinnedConsumer(t, cons, func(ctx context.Context, m jetstream.Msg) error {
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	}, 300*time.Millisecond, seqjetstream.WithLogger(discard))
	start(t, c)
	publish(t, js, "k.b", "0")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "0 acked, the partition owned: %+v", statsOf(c))

	publish(t, js, "k.g", "", "Status", "100")
	for i := range 3 {
		publish(t, js, "k.b", fmt.Sprint(1+i))
	}
	eventually(t, func() bool { return len(l.key("k.b")) == 4 }, "0-3 applied: %v; %+v", lazy(func() any { return l.key("k.b") }), statsOf(c))
	t.Logf("catch-ups given up for the status message: %d", c.Stats().CatchUpsAbandoned)
	eventually(t, func() bool { return info(t, probe).NumAckPending == 0 }, "the status message given up at MaxDeliver: %+v", lazy(func() any { return info(t, probe) }))

	oneLostThenTheNext(t, js, c, l, lost)
	assert.Empty(t, l.key("k.g"), "the status message never runs")
}

// A reconnect loses the deliveries on the wire, but the server may go on
// holding a pull of the old connection: it keeps a waiting pull while its
// reply subject has interest, and nats.go subscribes the pull's inbox
// again on the new connection. The server then ends that pull at its
// expiry, on the new connection, as if it had lost nothing on its way,
// and the gap its losses leave reads as deliveries nats.go swallowed. Here
// 1 (k.a) is out with the old owner past the catch-up's bound; a pull of
// the new owner loses 1 of k.b and 1 of k.c on the wire, the connection
// is cut, and nats.go reconnects at once. The catch-up must start over,
// not give up on 1 as a stored status message and run 2 before it. The
// instance sees the reconnect on the connection of its WithHandover
// JetStream, the one its consumer was made from.
func TestDeliveriesLostInAReconnectDoNotGiveACatchUpUp(t *testing.T) {
	url, js, s, consumerFor := pinnedFixtureAt(t, func(cfg *jetstream.ConsumerConfig) {
		cfg.AckWait = 1500 * time.Millisecond // a catch-up's bound is 6s
	})
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	first, stop := heldByAPlainClient(t, js, consumerFor)

	prx := startProxy(t, strings.TrimPrefix(url, "nats://"))
	nc, err := nats.Connect(prx.url(), nats.ReconnectWait(10*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	ijs, err := jetstream.New(nc)
	require.NoError(t, err)
	cn, err := ijs.Consumer(context.Background(), "S", "part")
	require.NoError(t, err)
	pulls := make(chan struct{}, 1) // a pull began
	cons := sizingConsumer{cn, func(int) {
		select {
		case pulls <- struct{}{}:
		default:
		}
	}}
	rec := recordingHandler{records: make(chan slog.Record, 256)}
	l := newLedger()
	c := pinnedConsumer(t, cons, func(ctx context.Context, m jetstream.Msg) error {
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	}, 500*time.Millisecond, seqjetstream.WithHandover(ijs), seqjetstream.WithLogger(slog.New(rec)))
	start(t, c)
	second := pinTheNewOwner(t, js, s) // the new owner catches up, holding 2, missing 1
	eventually(t, func() bool { return c.Stats().Consumers[0].Waiting == 1 }, "2 held by the catch-up: %+v", statsOf(c))

	// At the start of a pull, what the server sends on the connection is
	// lost, then the connection is cut.
	select {
	case <-pulls:
	default:
	}
	select {
	case <-pulls:
	case <-time.After(20 * time.Second):
		t.Fatal("no pull")
	}
	reconnects := nc.Stats().Reconnects
	eventually(t, func() bool { return info(t, probe).NumWaiting == 1 }, "the pull waiting at the server")
	prx.loseFromServer()
	b := []uint64{publish(t, js, "k.b", "0")}
	cc := []uint64{publish(t, js, "k.c", "0")}
	eventually(t, func() bool { return info(t, probe).Delivered.Stream >= cc[0] }, "0 of k.b and k.c delivered, and lost on the wire")
	prx.cut()
	eventually(t, func() bool { return nc.Stats().Reconnects > reconnects }, "reconnected")
	// The pull's inbox is subscribed again on the new connection once the
	// server answers a flush on it: the server still holds the pull, and
	// delivers 1 of k.b to it.
	require.NoError(t, nc.Flush())
	b = append(b, publish(t, js, "k.b", "1"))

	ended := boundEnded(t, rec, c)
	stop() // 1 comes back after its AckWait
	ranInStreamOrder(t, c, l, ended, map[string][]uint64{"k.a": {first, second}, "k.b": b, "k.c": cc})
}

// An owner that pulls without a pin (nats.go forgot it: here after a
// stored Nats-Pin-Id header, which grants nothing) may be pinned by the
// server through its waiting pull, whose first delivery under the new pin
// is a stored status message that nats.go drops and goes on (Status 100):
// no delivery shows the pull pinned. If the pin then moves (unpinned
// through the API, and another client's pull pinned by the next message),
// the server answers the waiting pull with a 423. That 423 proves nothing
// about a stored message: the owner must not count one out of its reach
// (the server no longer pins the pin its epoch took deliveries under),
// and its epoch goes on under the pin the server shows, or ends; whatever
// it does, a key's messages run in stream order. Here 1 (k.a) is taken by
// the other client and kept in progress, and 2 (k.a) comes to the owner
// once it is pinned again: 2 must run after 1. MaxDeliver 2 lets the
// server give the status message up, so that the catch-up can end.
func TestServers423AfterAStatusMessagePinnedThePullGrantsNothing(t *testing.T) {
	js, s, consumerFor := pinnedFixtureOf(t, func(cfg *jetstream.ConsumerConfig) {
		cfg.AckWait, cfg.MaxDeliver = 2*time.Second, 2
	})
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	pinned := func() string {
		for _, g := range info(t, probe).PriorityGroups {
			return g.PinnedClientID
		}
		return ""
	}

	var cp atomic.Pointer[seqjetstream.Consumer]
	forged, forgot := make(chan struct{}, 8), make(chan int, 8) // forgot: what the owner counted out of reach then
	log := hookHandler(func(r slog.Record) {
		switch {
		case strings.Contains(r.Message, "stored Nats-Pin-Id header made nats.go pull with a pin"):
			forged <- struct{}{}
		case strings.Contains(r.Message, "Status 423 header made nats.go forget this instance's pin"):
			forgot <- seqjetstream.Unreachable(cp.Load(), 0)
		}
	})
	l := newLedger()
	// The held pull asks for two: after a status the owner pulls one
	// message at a time for a while, and a pull of one that the status
	// message filled is done at the server.
	held := &heldPull{Consumer: consumerFor(t), batch: 2}
	c := pinnedConsumer(t, held, func(ctx context.Context, m jetstream.Msg) error {
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	}, 300*time.Millisecond, seqjetstream.WithHandover(js), seqjetstream.WithLogger(slog.New(log)))
	cp.Store(c)
	start(t, c)
	publish(t, js, "k.b", "0")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "0 acked, the partition owned: %+v", statsOf(c))

	// A stored pin header makes nats.go pull with it; the server's 423
	// makes it forget it, and the owner unpins once what it holds is done.
	publish(t, js, "k.b", "f", "Nats-Pin-Id", "forged")
	select {
	case <-forged:
	case <-time.After(20 * time.Second):
		t.Fatalf("the stored pin header not seen: %+v", c.Stats())
	}
	eventually(t, func() bool { return pinned() == "" }, "the owner unpinned")

	// Its next pull, without a pin, is held at the server; the status
	// message pins it, and nats.go drops the message and goes on.
	// (A pull before it that the owner ended itself may still wait at the
	// server, for at most its expiry, 300ms: the held one is alone after.)
	held.armed.Store(true)
	eventually(t, func() bool { return !held.armed.Load() }, "the owner's held pull sent")
	sent := time.Now()
	eventually(t, func() bool { return time.Since(sent) > 300*time.Millisecond && info(t, probe).NumWaiting == 1 }, "the owner's held pull waiting alone")
	status := publish(t, js, "k.g", "", "Status", "100")
	eventually(t, func() bool { return info(t, probe).Delivered.Stream >= status && pinned() != "" }, "the status message delivered under a new pin")

	// The pin moves: unpinned, and another client's pull pinned by 1,
	// which it keeps in progress; the server answers the owner's pull
	// with a 423.
	other := consumerFor(t)
	taken := make(chan jetstream.Msg, 1)
	go func() {
		b, err := other.Fetch(1, jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup("g"))
		if err == nil {
			for m := range b.Messages() {
				taken <- m
			}
		}
		close(taken)
	}()
	eventually(t, func() bool { return info(t, probe).NumWaiting == 2 }, "the other client's pull waiting: %+v %v", lazy(func() any { return info(t, probe) }), lazy(func() any { return c.Stats() }))
	require.NoError(t, s.UnpinConsumer(context.Background(), "part", "g"))
	first := publish(t, js, "k.a", "1")
	m, ok := <-taken
	require.True(t, ok, "the other client took 1")
	stop := keepInProgress(t, m)
	select {
	case n := <-forgot:
		assert.Zero(t, n, "counted out of reach on the server's 423")
	case <-time.After(20 * time.Second):
		t.Fatalf("the server's 423 not seen: %+v", c.Stats())
	}

	second := publish(t, js, "k.a", "2")
	eventually(t, func() bool { return c.Stats().Received >= 3 }, "2 delivered to the owner: %+v", statsOf(c))
	assert.Empty(t, l.key("k.a"), "nothing of k.a ran while 1 was out")
	stop() // 1 comes back after its AckWait
	eventually(t, func() bool { return len(l.key("k.a")) == 2 }, "1 and 2 applied: %v; %+v", lazy(func() any { return l.key("k.a") }), statsOf(c))
	assert.Equal(t, []uint64{first, second}, l.key("k.a"), "in stream order")
	assert.Empty(t, l.key("k.g"), "the status message never runs")
	for {
		select {
		case n := <-forgot:
			assert.Zero(t, n, "counted out of reach at a later 423")
			continue
		default:
		}
		break
	}
}
