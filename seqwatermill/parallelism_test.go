package seqwatermill_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqwatermill"
)

// The decorator adds parallelism only where the subscriber sends a message
// before the previous one is acked (the README's table of subscribers).
// watermill-nats does not: it sends the next message after the Ack, so on
// it the durable decorator keeps order one message at a time, as the plain
// Router does, and only WithAckOnReceive (which acks before the handler)
// runs keys at once. (On gochannel: order_test.go; on watermill-kafka:
// kafkatest.)

// TestOrderAndThroughputOnWatermillNATS consumes 400 messages over 32
// keys, a 2ms handler, from watermill-nats' JetStream subscriber on an
// embedded nats-server, three ways, and asserts each key's order in each
// and that the durable ways have one message in the handler at a time.
// The rates are logged; the README's table quotes them (go test -v).
func TestOrderAndThroughputOnWatermillNATS(t *testing.T) {
	const n = 400
	for _, c := range []struct {
		name    string
		opts    []seqwatermill.Option // nil: the plain Router
		durable bool
	}{
		{"plain Router", nil, true},
		{"Router + seqwatermill", []seqwatermill.Option{}, true},
		{"Router + seqwatermill, WithAckOnReceive (not durable)", []seqwatermill.Option{seqwatermill.WithAckOnReceive()}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runOnNATS(t, n, c.opts)
			t.Logf("%-55s %6.0f msgs/s, at most %d in the handler at once", c.name, r.rate, r.most)
			assert.Empty(t, r.outOfOrder, "keys handled out of order")
			if c.durable {
				assert.Equal(t, 1, r.most, "messages in the handler at once: watermill-nats sends the next after the Ack")
			}
		})
	}
}

type natsRun struct {
	rate       float64  // messages per second, from the first handled to the last
	outOfOrder []string // keys whose messages were handled out of order, or more than once
	most       int      // most messages in the handler at once
}

// runOnNATS publishes n messages over 32 keys (payload: the message's
// index) to a fresh nats-server, then consumes them with a Router over
// watermill-nats, decorated with opts unless nil, until all were handled.
func runOnNATS(t *testing.T, n int, opts []seqwatermill.Option) natsRun {
	const keys, work = 32, 2 * time.Millisecond
	url := startNATS(t)
	pub, err := wmjs.NewPublisher(wmjs.PublisherConfig{URL: url, Logger: watermill.NopLogger{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	nc := connect(t, url)
	t.Cleanup(nc.Close) // before connect's cleanup, which waits for it
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "events", Subjects: []string{"events"}})
	require.NoError(t, err)
	for i := range n {
		m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
		m.Metadata.Set("key", fmt.Sprint("k", i%keys))
		require.NoError(t, pub.Publish("events", m))
	}
	var consumer jetstream.Consumer
	sub, err := wmjs.NewSubscriber(wmjs.SubscriberConfig{
		Conn: connect(t, url), Logger: watermill.NopLogger{},
		ResourceInitializer: consumerWithAckWait(30*time.Second, &consumer),
	})
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	if opts != nil {
		router.AddSubscriberDecorators(seqwatermill.Decorator(append([]seqwatermill.Option{
			seqwatermill.WithKeyMetadata("key"), seqwatermill.WithLogger(watermill.NopLogger{})}, opts...)...))
	}
	var (
		mu          sync.Mutex
		last        = map[string]int{}
		bad         = map[string]bool{}
		handled, in int
		r           natsRun
		first, done time.Time
		all         = make(chan struct{})
	)
	router.AddConsumerHandler("h", "events", sub, func(m *message.Message) error {
		key := m.Metadata.Get("key")
		i, err := strconv.Atoi(string(m.Payload))
		if err != nil {
			return err
		}
		mu.Lock()
		if first.IsZero() {
			first = time.Now()
		}
		in++
		r.most = max(r.most, in)
		if prev, ok := last[key]; ok && i <= prev {
			bad[key] = true
		}
		last[key] = i
		mu.Unlock()
		time.Sleep(work) // the handler's I/O
		mu.Lock()
		defer mu.Unlock()
		in--
		if handled++; handled == n {
			done = time.Now()
			close(all)
		}
		return nil
	})
	ran := make(chan error, 1)
	go func() { ran <- router.Run(context.Background()) }()
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d messages handled in 60s", handled, n)
	}
	// Every message acked before the Router closes: watermill-nats closes
	// its channel while it may be sending on it (see natsRig.waitAcked).
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := consumer.Info(context.Background())
		require.NoError(t, err)
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream: %d messages un-acked, %d pending after 20s", info.NumAckPending, info.NumPending)
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, router.Close())
	require.NoError(t, <-ran)
	mu.Lock()
	defer mu.Unlock()
	r.rate = float64(n-1) / done.Sub(first).Seconds()
	for k := range bad {
		r.outOfOrder = append(r.outOfOrder, k)
	}
	return r
}
