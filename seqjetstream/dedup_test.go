package seqjetstream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqjetstream"
)

// smallPinned is a stream on "k.*" with one pinned consumer whose
// MaxAckPending (and so WithMaxBuffered, and the ring of resolved
// sequences, 4 × WithMaxBuffered) is small, and whose AckWait is long: the
// server redelivers nothing by itself within a test, only what the test
// gives back with a Nak of its own.
func smallPinned(t *testing.T, maxAckPending int) (jetstream.JetStream, jetstream.Consumer) {
	t.Helper()
	_, js := connect(t, startServer(t))
	s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
	return js, newConsumer(t, s, jetstream.ConsumerConfig{
		Durable: "part", AckWait: time.Minute, MaxAckPending: maxAckPending,
		PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: time.Minute,
	})
}

// lostAnswer drops the first answer (Ack or Term) to sequence seq and
// keeps that delivery, so that the test can give it back itself (a Nak
// the consumer never sent): the server then redelivers it at once, as it
// would after AckWait had the answer been lost on the way. It counts the
// answers the server gets, as "ack 3", "term 3".
type lostAnswer struct {
	seq  uint64
	mu   sync.Mutex
	kept jetstream.Msg
	got  map[string]int
}

func (l *lostAnswer) wrap(t *testing.T, cons jetstream.Consumer) jetstream.Consumer {
	l.got = make(map[string]int)
	return wrapConsumer{cons, func(m jetstream.Msg) jetstream.Msg {
		seq := seqOf(t, m)
		answer := func(kind string) func() bool {
			return func() bool {
				l.mu.Lock()
				defer l.mu.Unlock()
				if seq == l.seq && l.kept == nil {
					l.kept = m
					return false
				}
				l.got[fmt.Sprint(kind, " ", seq)]++
				return true
			}
		}
		return hookMsg{Msg: m, onAck: answer("ack"), onTerm: answer("term")}
	}}
}

// redeliver gives back the delivery whose answer was dropped.
func (l *lostAnswer) redeliver(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	m := l.kept
	l.mu.Unlock()
	require.NotNil(t, m, "the answer to %d was not dropped", l.seq)
	require.NoError(t, m.Nak())
}

// answers returns how many answers of kind ("ack", "term") the server got
// for seq.
func (l *lostAnswer) answers(kind string, seq uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.got[fmt.Sprint(kind, " ", seq)]
}

func TestRedeliveryBelowItsKeysLastAppliedSequenceIsAckedNotHandled(t *testing.T) {
	js, cons := smallPinned(t, 2)
	lost := &lostAnswer{seq: 1}
	calls := newLedger()
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{lost.wrap(t, cons)}, func(ctx context.Context, m jetstream.Msg) error {
		calls.call(seqOf(t, m))
		return nil
	}, seqjetstream.WithMaxBuffered(2)) // the ring of resolved sequences holds 8
	require.NoError(t, err)
	start(t, c)

	publish(t, js, "k.a", "1")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "1 handled, its ack lost")
	for range 9 {
		publish(t, js, "k.a", "x")
	}
	eventually(t, func() bool { return c.Stats().Acked == 10 }, "2..10 handled: %+v", statsOf(c))
	// 10 resolved, so the ring no longer has 1; the key remembers 10.
	lost.redeliver(t)

	eventually(t, func() bool { return lost.answers("ack", 1) == 1 }, "the redelivery of 1 acked: %+v", statsOf(c))
	st := c.Stats()
	assert.Equal(t, 1, calls.calledFor(1), "handler calls for 1")
	assert.Equal(t, uint64(1), st.Duplicates, "duplicates")
	assert.Equal(t, uint64(10), st.Acked, "acks after a handler")
	assert.Equal(t, uint64(11), st.Received, "deliveries")
	eventually(t, func() bool { return info(t, cons).NumAckPending == 0 }, "nothing pending")
}

func TestRedeliveryOfItsKeysLastMessageTerminatedIsTerminatedAgainNotHandled(t *testing.T) {
	js, cons := smallPinned(t, 2)
	lost := &lostAnswer{seq: 1}
	calls := newLedger()
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{lost.wrap(t, cons)}, func(ctx context.Context, m jetstream.Msg) error {
		if calls.call(seqOf(t, m)); m.Subject() == "k.a" {
			return seqjetstream.Terminal(errors.New("poison"))
		}
		return nil
	}, seqjetstream.WithMaxBuffered(2), seqjetstream.WithLogger(discard))
	require.NoError(t, err)
	start(t, c)

	publish(t, js, "k.a", "1")
	eventually(t, func() bool { return c.Stats().Termed == 1 }, "1 terminated, its Term lost")
	for i := range 8 {
		publish(t, js, fmt.Sprint("k.", i%2), "x") // two other keys
	}
	eventually(t, func() bool { return c.Stats().Acked == 8 }, "8 more handled: %+v", statsOf(c))
	// 9 resolved, so the ring no longer has 1; its key, among 3, is remembered.
	lost.redeliver(t)

	eventually(t, func() bool { return lost.answers("term", 1) == 1 }, "the redelivery of 1 terminated: %+v", statsOf(c))
	st := c.Stats()
	assert.Equal(t, 1, calls.calledFor(1), "handler calls for 1")
	assert.Zero(t, lost.answers("ack", 1), "acks of 1")
	assert.Equal(t, uint64(1), st.Duplicates, "duplicates")
	assert.Equal(t, uint64(1), st.Termed, "terminations after a handler")
	eventually(t, func() bool { return info(t, cons).NumAckPending == 0 }, "nothing pending")
}

// On a plain consumer a lower sequence proves nothing: several instances
// may share it, and one that dies leaves its message to come back after
// later ones of its key. Such a message is handled, not taken for a
// duplicate.
func TestPlainConsumerHandlesAnotherInstancesRedeliveryAfterLaterMessagesOfItsKey(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{AckWait: time.Minute})
	l := newLedger()
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	})

	// Another instance takes 1, and dies before it answers.
	publish(t, f.js, "k.a", "1")
	b, err := f.cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	require.NoError(t, err)
	other := <-b.Messages()
	require.NotNil(t, other, "the other instance's fetch: %v", b.Error())
	for range b.Messages() {
	}

	start(t, c)
	publish(t, f.js, "k.a", "2")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "2 handled")
	require.NoError(t, other.Nak()) // as its AckWait would, sooner
	eventually(t, func() bool { return c.Stats().Acked == 2 }, "1 handled: %+v", statsOf(c))
	assert.Equal(t, []uint64{2, 1}, l.key("k.a"))
	assert.Zero(t, c.Stats().Duplicates)
}

// An instance that loses its partition forgets what it applied there: a
// message it dropped unrun with the lost epoch comes back, behind a later
// message of its key that it had applied (a High one, which overtook it),
// and runs when this instance owns the partition again.
func TestRegainedPartitionRunsWhatTheLostEpochHadNotApplied(t *testing.T) {
	js, s, consumerFor := pinnedFixture(t) // AckWait 500ms
	l := newLedger()
	var calls2 atomic.Int32
	started1, release1, started2 := make(chan struct{}), make(chan struct{}), make(chan struct{})
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{consumerFor(t)}, func(ctx context.Context, m jetstream.Msg) error {
		seq := seqOf(t, m)
		switch {
		case seq == 1:
			close(started1)
			<-release1
		case seq == 2 && calls2.Add(1) == 1:
			close(started2)
			<-ctx.Done() // the partition is lost while 2 runs
			return ctx.Err()
		}
		l.apply("k", seq)
		return nil
	}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300*time.Millisecond),
		seqjetstream.WithPriorityHeader(seqjetstream.DefaultPriorityHeader), seqjetstream.WithLogger(discard))
	require.NoError(t, err)
	start(t, c)

	publish(t, js, "k.a", "1")
	<-started1
	publish(t, js, "k.a", "2")
	publish(t, js, "k.a", "3", seqjetstream.DefaultPriorityHeader, "high")
	eventually(t, func() bool { return c.Stats().Buffered == 3 }, "three held")
	close(release1) // 3 overtakes 2 and is applied; 2 starts
	<-started2
	eventually(t, func() bool { return c.Stats().Acked == 2 }, "1 and 3 acked: %+v", statsOf(c))

	// The partition is unpinned; this instance, the only one pulling,
	// learns it at its next pull, drops 2 unanswered and gets the pin
	// again, with a message to trigger it: 2 comes back after its AckWait.
	require.NoError(t, s.UnpinConsumer(context.Background(), "part", "g"))
	publish(t, js, "k.a", "4")
	eventually(t, func() bool { return l.count() == 4 }, "four applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Equal(t, []uint64{1, 3, 2, 4}, l.key("k"))
	assert.Equal(t, int32(2), calls2.Load(), "handler calls for 2")
	st := c.Stats()
	assert.Zero(t, st.Duplicates, "duplicates")
	assert.Equal(t, uint64(1), st.Dropped, "dropped with the lost epoch")
	assert.True(t, st.Consumers[0].Owned)
}

func TestRememberedKeysStayBoundedOnAPinnedConsumer(t *testing.T) {
	js, cons := smallPinned(t, 50)
	var c *seqjetstream.Consumer
	var mu sync.Mutex
	most := 0 // the most keys remembered that a handler saw
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, func(context.Context, jetstream.Msg) error {
		n, _ := seqjetstream.RememberedKeys(c, 0)
		mu.Lock()
		most = max(most, n)
		mu.Unlock()
		return nil
	}, seqjetstream.WithMaxBuffered(50))
	require.NoError(t, err)
	start(t, c)
	const n = 2000
	for i := range n {
		publish(t, js, fmt.Sprintf("k.%d", i), "x") // every message a new key
	}
	eventually(t, func() bool { return c.Stats().Acked == n }, "acked")
	keys, limit := seqjetstream.RememberedKeys(c, 0)
	assert.Equal(t, 200, limit, "4 × WithMaxBuffered")
	assert.Equal(t, 200, keys, "keys remembered at the end")
	mu.Lock()
	assert.LessOrEqual(t, most, 200, "keys remembered at most, as the handlers saw")
	mu.Unlock()
	assert.Equal(t, 200, c.Stats().Consumers[0].Remembered, "sequences remembered")
}

// loseReplay loses on its way the second first delivery of stream
// sequence seq: its first delivery after the consumer was reset (a
// replay). The server redelivers it after its AckWait.
func loseReplay(t *testing.T, cons jetstream.Consumer, seq uint64) (jetstream.Consumer, *atomic.Bool) {
	var firsts atomic.Int32
	var lost atomic.Bool
	return wrapConsumer{cons, func(m jetstream.Msg) jetstream.Msg {
		meta, err := m.Metadata()
		require.NoError(t, err)
		if meta.Sequence.Stream == seq && meta.NumDelivered == 1 && firsts.Add(1) == 2 {
			lost.Store(true)
			return nil
		}
		return m
	}}, &lost
}

// After an operator resets a consumer to an earlier sequence, the server
// delivers the messages from there again as first deliveries: a replay,
// which runs the handler again, in stream order, not a redelivery after
// a lost answer. One of them (3) is lost on its way: its redelivery, too,
// runs the handler, for the answer this instance remembers for 3 is of
// the time before the reset. (On a partition it runs in its place, after
// the owner's catch-up; on a plain consumer when it comes back.)
func TestReplayAfterAResetRunsTheHandlerAgain(t *testing.T) {
	for _, pinned := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "pinned"}[pinned], func(t *testing.T) {
			_, js := connect(t, startServer(t))
			s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
			cc := jetstream.ConsumerConfig{Durable: "d", AckWait: 500 * time.Millisecond, MaxAckPending: 100}
			if pinned {
				cc.PriorityPolicy, cc.PriorityGroups, cc.PinnedTTL = jetstream.PriorityPolicyPinned, []string{"g"}, time.Minute
			}
			cons, lost := loseReplay(t, newConsumer(t, s, cc), 3)
			l := newLedger()
			c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, func(ctx context.Context, m jetstream.Msg) error {
				l.call(seqOf(t, m))
				l.apply("k", seqOf(t, m))
				return nil
			}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300*time.Millisecond))
			require.NoError(t, err)
			start(t, c)
			for i := 1; i <= 5; i++ {
				publish(t, js, "k.a", fmt.Sprint(i))
			}
			eventually(t, func() bool { return c.Stats().Acked == 5 }, "five acked: %+v", statsOf(c))
			// An ack the server takes after the reset would count for the
			// replay of its message.
			eventually(t, func() bool { return info(t, cons).AckFloor.Stream == 5 }, "the acks taken by the server")

			_, err = js.ResetConsumerToSequence(context.Background(), "S", "d", 2)
			require.NoError(t, err)
			eventually(t, func() bool { return l.count() == 9 }, "2 to 5 applied again: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
			assert.True(t, lost.Load(), "the replay of 3 was lost on its way")
			want := []uint64{1, 2, 3, 4, 5, 2, 4, 5, 3} // a plain consumer runs a lost delivery when it comes back
			if pinned {
				want = []uint64{1, 2, 3, 4, 5, 2, 3, 4, 5} // a partition's owner waits for it
			}
			assert.Equal(t, want, l.key("k"), "the replay's order")
			for seq := uint64(2); seq <= 5; seq++ {
				assert.Equal(t, 2, l.calledFor(seq), "handler calls for %d", seq)
			}
			eventually(t, func() bool { return c.Stats().Acked == 9 }, "nine acked: %+v", statsOf(c))
			assert.Zero(t, c.Stats().Duplicates, "duplicates")
		})
	}
}
