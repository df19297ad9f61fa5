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

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqjetstream"
)

// The guarantee of this file: no message a publisher can store halts a
// partition, loses messages or skips them silently.

// countFetches is a consumer that counts its pulls.
type countFetches struct {
	jetstream.Consumer
	n atomic.Int32

	mu      sync.Mutex
	waiters map[int32][]chan struct{}
}

func (c *countFetches) Fetch(n int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	got := c.n.Add(1)
	c.mu.Lock()
	for at, chs := range c.waiters {
		if got >= at {
			for _, ch := range chs {
				close(ch)
			}
			delete(c.waiters, at)
		}
	}
	c.mu.Unlock()
	return c.Consumer.Fetch(n, opts...)
}

// reached returns a channel closed once the consumer has been pulled from
// more pulls times from now.
func (c *countFetches) reached(more int32) <-chan struct{} {
	ch := make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.n.Load() + more
	if c.waiters == nil {
		c.waiters = make(map[int32][]chan struct{})
	}
	c.waiters[at] = append(c.waiters[at], ch)
	return ch
}

// A message published with a Nats-Pin-Id header of its own (forwarded
// with all its headers, say) comes back with two: the stored one first,
// then the server's. The partition follows the server's, so it keeps its
// epoch and what it holds. nats.go follows the first and sends it with
// its next pull, which the server refuses (423): the partition is held
// by a pin no pull carries. With WithHandover the owner lets what it
// holds finish, then unpins it, and its next pull is pinned anew;
// without, the server moves the pin after PinnedTTL. Either way every
// message runs once, in order.
func TestStoredPinHeaderIsNotTakenForAPinChange(t *testing.T) {
	for _, handover := range []bool{true, false} {
		t.Run(map[bool]string{true: "with hand-over", false: "without"}[handover], func(t *testing.T) {
			_, js := connect(t, startServer(t))
			s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
			ttl := time.Minute // longer than the test waits: only the unpin moves it
			if !handover {
				ttl = 2 * time.Second
			}
			cons := &countFetches{Consumer: newConsumer(t, s, jetstream.ConsumerConfig{
				Durable: "part", AckWait: 500 * time.Millisecond, MaxAckPending: 100,
				PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: ttl,
			})}
			l := newLedger()
			opts := []seqjetstream.Option{seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300 * time.Millisecond), seqjetstream.WithLogger(discard)}
			if handover {
				opts = append(opts, seqjetstream.WithHandover(js))
			}
			c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, func(ctx context.Context, m jetstream.Msg) error {
				l.call(seqOf(t, m))
				l.apply("k", seqOf(t, m))
				return nil
			}, opts...)
			require.NoError(t, err)
			start(t, c)

			publish(t, js, "k.a", "1")
			eventually(t, func() bool { return c.Stats().Acked == 1 }, "1 acked, the partition owned: %+v", statsOf(c))
			publish(t, js, "k.a", "2", "Nats-Pin-Id", "forged")
			eventually(t, func() bool { return c.Stats().Acked == 2 }, "2 acked: %+v", statsOf(c))
			// The pull that brought 2 ends, and the next one goes out with
			// the forged pin.
			pulls := cons.n.Load()
			eventually(t, func() bool { return cons.n.Load() >= pulls+2 }, "two more pulls")
			for i := 3; i <= 5; i++ {
				publish(t, js, "k.a", fmt.Sprint(i), "Nats-Pin-Id", "forged")
			}
			publish(t, js, "k.a", "6")
			eventually(t, func() bool { return l.count() == 6 }, "six applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
			assert.Equal(t, []uint64{1, 2, 3, 4, 5, 6}, l.key("k"), "in stream order")
			for seq := uint64(1); seq <= 6; seq++ {
				assert.Equal(t, 1, l.calledFor(seq), "handler calls for %d", seq)
			}
			eventually(t, func() bool { return c.Stats().Acked == 6 }, "six acked: %+v", statsOf(c))
			st := c.Stats()
			assert.Zero(t, st.Duplicates, "duplicates")
			assert.True(t, st.Consumers[0].Owned, "the partition owned again")
		})
	}
}

// The pull that follows a stored pin header is refused while the server
// still pins this instance: the epoch is not lost for it. A handler
// running meanwhile finishes under its epoch and its message is
// acknowledged, so it never runs again (once the partition was lost
// here, its acknowledgement was not sent and the message ran again on
// the next pin).
func TestStoredPinHeaderDoesNotRunARunningMessageAgain(t *testing.T) {
	_, js := connect(t, startServer(t))
	s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
	cons := &countFetches{Consumer: newConsumer(t, s, jetstream.ConsumerConfig{
		Durable: "part", AckWait: 500 * time.Millisecond, MaxAckPending: 100,
		PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: time.Minute,
	})}
	l := newLedger()
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, func(ctx context.Context, m jetstream.Msg) error {
		seq := seqOf(t, m)
		if l.call(seq) == 1 && seq == 3 {
			// Runs until the pull refused for the stored pin has ended
			// and the next one is made.
			select {
			case <-cons.reached(2):
			case <-time.After(10 * time.Second):
			}
		}
		l.apply("k", seq)
		return nil
	}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300*time.Millisecond),
		seqjetstream.WithLogger(discard), seqjetstream.WithHandover(js))
	require.NoError(t, err)
	start(t, c)

	publish(t, js, "k.a", "1")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "1 acked, the partition owned: %+v", statsOf(c))
	publish(t, js, "k.a", "2", "Nats-Pin-Id", "forged")
	eventually(t, func() bool { return c.Stats().Acked == 2 }, "2 acked: %+v", statsOf(c))
	publish(t, js, "k.a", "3", "Nats-Pin-Id", "forged")
	eventually(t, func() bool { return l.count() == 3 }, "3 applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	publish(t, js, "k.a", "4")
	eventually(t, func() bool { return c.Stats().Acked == 4 }, "four acked: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Equal(t, []uint64{1, 2, 3, 4}, l.key("k"), "applied, in stream order")
	for seq := uint64(1); seq <= 4; seq++ {
		assert.Equal(t, 1, l.calledFor(seq), "handler calls for %d", seq)
	}
	assert.Zero(t, c.Stats().Duplicates, "duplicates")
}

// A stored empty message with Status 423 makes nats.go forget the pin
// while the server still pins this instance. Without WithHandover or
// WithBalance the owner cannot unpin, but it still lets what it holds
// run and be acknowledged before the partition is lost: a handler
// running at the 423 finishes under its epoch, and its message never
// runs again (once the epoch was lost at once, its acknowledgement was
// refused, and the redelivery ran it a second time). The server gives
// the status message up at MaxDeliver, and the partition goes on.
func TestStatus423MessageDoesNotRunARunningMessageAgain(t *testing.T) {
	_, js := connect(t, startServer(t))
	s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
	cons := &countFetches{Consumer: newConsumer(t, s, jetstream.ConsumerConfig{
		Durable: "part", AckWait: 2 * time.Second, MaxAckPending: 100, MaxDeliver: 2,
		PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 2 * time.Second,
	})}
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	l := newLedger()
	release := make(chan struct{})
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, func(ctx context.Context, m jetstream.Msg) error {
		seq := seqOf(t, m)
		if l.call(seq) == 1 && seq == 2 {
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		}
		l.apply("k", seq)
		return nil
	}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300*time.Millisecond), seqjetstream.WithLogger(discard))
	require.NoError(t, err)
	start(t, c)

	publish(t, js, "k.a", "1")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "1 acked, the partition owned: %+v", statsOf(c))
	publish(t, js, "k.a", "2")
	eventually(t, func() bool { return l.calledFor(2) == 1 }, "2 running")
	publish(t, js, "k.g", "", "Status", "423", "Description", "not from the server") // 3
	eventually(t, func() bool { return info(t, probe).Delivered.Stream >= 3 }, "the status message delivered")
	// The pull that brought the status message has ended, and the next
	// one is made: 2 has run past the 423.
	select {
	case <-cons.reached(1):
	case <-time.After(10 * time.Second):
		t.Fatal("no pull after the status message")
	}
	close(release)
	eventually(t, func() bool { return c.Stats().Acked == 2 }, "2 acked: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	publish(t, js, "k.a", "4")
	eventually(t, func() bool { return l.count() == 3 }, "4 applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Equal(t, []uint64{1, 2, 4}, l.key("k"), "applied, in stream order")
	for _, seq := range []uint64{1, 2, 4} {
		assert.Equal(t, 1, l.calledFor(seq), "handler calls for %d", seq)
	}
	eventually(t, func() bool { return c.Stats().Acked == 3 }, "three acked: %+v", statsOf(c))
	assert.Zero(t, c.Stats().Duplicates, "duplicates")
}

// An empty message with a Status header looks to nats.go like a control
// message of the server: its Fetch drops it, though the server counts it
// delivered and redelivers it every AckWait. On a partition the owner
// sees the gap in the delivery sequence and catches up, for a message
// that never comes. The catch-up is given up after four AckWaits
// (logged, counted), the held messages run in order, and the message's
// later redeliveries, gaps again, hold nothing up.
func TestEmptyMessageWithAStatusHeaderDoesNotHaltAPartition(t *testing.T) {
	js, s, consumerFor := pinnedFixture(t) // AckWait 500ms
	l := newLedger()
	rec := recordingHandler{records: make(chan slog.Record, 64)}
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{consumerFor(t)}, func(ctx context.Context, m jetstream.Msg) error {
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300*time.Millisecond), seqjetstream.WithLogger(slog.New(rec)))
	require.NoError(t, err)
	start(t, c)

	publish(t, js, "k.a", "1")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "1 acked, the partition owned: %+v", statsOf(c))
	begin := time.Now()
	publish(t, js, "k.b", "", "Status", "100") // 2: never reaches the consumer
	for i := 3; i <= 7; i++ {
		publish(t, js, "k.a", fmt.Sprint(i))
	}
	eventually(t, func() bool { return l.count() == 6 }, "six applied: %v; %+v", lazy(func() any { return l.key("k.a") }), statsOf(c))
	assert.GreaterOrEqual(t, time.Since(begin), 2*time.Second, "held back for four AckWaits")
	assert.Equal(t, []uint64{1, 3, 4, 5, 6, 7}, l.key("k.a"), "in stream order")
	assert.Equal(t, uint64(1), c.Stats().CatchUpsAbandoned, "catch-ups abandoned")
	assert.Equal(t, 1, givenUpLogged(rec), "catch-ups given up, logged at Error")

	// The server goes on redelivering 2, which goes on never arriving:
	// each time a gap, and a catch-up that ends at its first check.
	probe, err := s.Consumer(context.Background(), "part")
	require.NoError(t, err)
	delivered := info(t, probe).Delivered.Consumer
	eventually(t, func() bool { return info(t, probe).Delivered.Consumer >= delivered+3 }, "2 redelivered three more times")
	begin = time.Now()
	for i := 8; i <= 10; i++ {
		publish(t, js, "k.a", fmt.Sprint(i))
	}
	eventually(t, func() bool { return l.count() == 9 }, "nine applied: %v; %+v", lazy(func() any { return l.key("k.a") }), statsOf(c))
	assert.Less(t, time.Since(begin), 2*time.Second, "not held back again for four AckWaits")
	assert.Equal(t, []uint64{1, 3, 4, 5, 6, 7, 8, 9, 10}, l.key("k.a"), "in stream order")
	st := c.Stats()
	assert.Equal(t, uint64(1), st.CatchUpsAbandoned, "catch-ups abandoned")
	assert.Zero(t, st.Duplicates, "duplicates")
	eventually(t, func() bool { return info(t, probe).NumAckPending == 1 }, "2 alone unacknowledged: %d", lazy(func() any { return info(t, probe).NumAckPending }))
	assert.Zero(t, givenUpLogged(rec), "catch-ups given up since, logged")
}

// givenUpLogged counts the records of abandoned catch-ups rec got since
// the last call.
func givenUpLogged(rec recordingHandler) int {
	n := 0
	for {
		select {
		case r := <-rec.records:
			if r.Level == slog.LevelError && strings.HasPrefix(r.Message, "seqjetstream: catch-up given up") {
				n++
			}
		default:
			return n
		}
	}
}
