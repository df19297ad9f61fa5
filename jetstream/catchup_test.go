package jetstream_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/jetstream"
)

// loseFirst is a pinned consumer whose first delivery of stream sequence
// seq is lost on its way (see wrapConsumer): the server counts it
// delivered, and redelivers it only after its AckWait, after the
// deliveries that followed it.
func loseFirst(t *testing.T, cons natsjs.Consumer, seq uint64) (natsjs.Consumer, *atomic.Bool) {
	var lost atomic.Bool
	return wrapConsumer{cons, func(m natsjs.Msg) natsjs.Msg {
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
	c, err := jetstream.NewConsumer([]natsjs.Consumer{cons}, func(ctx context.Context, m natsjs.Msg) error {
		l.apply("k", seqOf(t, m))
		return nil
	}, jetstream.WithMaxBuffered(100), jetstream.WithFetchExpiry(300*time.Millisecond))
	require.NoError(t, err)
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
