package jetstream_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/jetstream"
)

// The guarantee of this file: no message a publisher can store halts a
// partition, loses messages or skips them silently.

// countFetches is a consumer that counts its pulls.
type countFetches struct {
	natsjs.Consumer
	n atomic.Int32
}

func (c *countFetches) Fetch(n int, opts ...natsjs.FetchOpt) (natsjs.MessageBatch, error) {
	c.n.Add(1)
	return c.Consumer.Fetch(n, opts...)
}

// A message published with a Nats-Pin-Id header of its own (forwarded
// with all its headers, say) comes back with two: the stored one first,
// then the server's. The partition follows the server's, so it keeps its
// epoch and what it holds. nats.go follows the first and sends it with
// its next pull, which the server refuses (423): the partition is lost
// to a pin no pull carries. With WithHandover the owner unpins it at
// once, and its next pull is pinned anew; without, the server moves the
// pin after PinnedTTL. Either way every message runs once, in order.
func TestStoredPinHeaderIsNotTakenForAPinChange(t *testing.T) {
	for _, handover := range []bool{true, false} {
		t.Run(map[bool]string{true: "with hand-over", false: "without"}[handover], func(t *testing.T) {
			_, js := connect(t, startServer(t))
			s := newStream(t, js, natsjs.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
			ttl := time.Minute // longer than the test waits: only the unpin moves it
			if !handover {
				ttl = 2 * time.Second
			}
			cons := &countFetches{Consumer: newConsumer(t, s, natsjs.ConsumerConfig{
				Durable: "part", AckWait: 500 * time.Millisecond, MaxAckPending: 100,
				PriorityPolicy: natsjs.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: ttl,
			})}
			l := newLedger()
			opts := []jetstream.Option{jetstream.WithMaxBuffered(100), jetstream.WithFetchExpiry(300 * time.Millisecond), jetstream.WithLogger(discard)}
			if handover {
				opts = append(opts, jetstream.WithHandover(js))
			}
			c, err := jetstream.NewConsumer([]natsjs.Consumer{cons}, func(ctx context.Context, m natsjs.Msg) error {
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
