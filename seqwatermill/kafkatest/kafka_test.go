package kafkatest_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/seqsched/seqsched/seqwatermill"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Sarama's metrics registry starts a ticker goroutine per client
		// that it never stops (go-metrics' meter arbiter).
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
}

const (
	partitions = 4
	keys       = 32
	work       = 2 * time.Millisecond // the handler's simulated work
)

// startCluster starts kfake with topic "events" of 4 partitions and n
// messages over 32 keys: each message's Kafka key, partition and "key"
// metadata name its key, its value is its index, and its watermill UUID is
// set as watermill-kafka's marshaler reads it.
func startCluster(t testing.TB, n int) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "events"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		k := i % keys
		key := fmt.Sprint("k", k)
		rs[i] = &kgo.Record{Topic: "events", Partition: int32(k % partitions), Key: []byte(key), Value: []byte(strconv.Itoa(i)),
			Headers: []kgo.RecordHeader{{Key: wmkafka.UUIDHeaderKey, Value: []byte(watermill.NewUUID())}, {Key: "key", Value: []byte(key)}}}
	}
	require.NoError(t, cl.ProduceSync(context.Background(), rs...).FirstErr())
	return c
}

// result is one run: messages per second from the first handled to the
// last, and the keys whose messages were handled out of order.
type result struct {
	rate       float64
	outOfOrder []string
	maxKeys    int // most keys in the handler at once
}

// run consumes the cluster's n messages with a Router over watermill-kafka
// (a fresh consumer group), decorated with opts unless nil, and returns
// once all were handled.
func run(t testing.TB, c *kfake.Cluster, n int, group string, opts []seqwatermill.Option) result {
	t.Helper()
	conf := wmkafka.DefaultSaramaSubscriberConfig()
	conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers: c.ListenAddrs(), Unmarshaler: wmkafka.DefaultMarshaler{}, OverwriteSaramaConfig: conf, ConsumerGroup: group,
	}, watermill.NopLogger{})
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	if opts != nil {
		router.AddSubscriberDecorators(seqwatermill.Decorator(append([]seqwatermill.Option{
			seqwatermill.WithKeyMetadata("key"), seqwatermill.WithLogger(watermill.NopLogger{})}, opts...)...))
	}
	// The Router closes its subscribers on goroutines of its own, and its
	// Close may return first: the test waits for their Close.
	closed := make(chan struct{})
	router.AddSubscriberDecorators(func(s message.Subscriber) (message.Subscriber, error) {
		return closeSignal{s, closed}, nil
	})
	var (
		mu          sync.Mutex
		last        = map[string]int{}
		bad         = map[string]bool{}
		handled     int
		inHandler   int
		most        int
		first, done time.Time
		all         = make(chan struct{})
	)
	router.AddConsumerHandler("h", "events", sub, func(m *message.Message) error {
		key := m.Metadata.Get("key")
		i, _ := strconv.Atoi(string(m.Payload))
		mu.Lock()
		if first.IsZero() {
			first = time.Now()
		}
		inHandler++
		most = max(most, inHandler)
		if prev, ok := last[key]; ok && i <= prev {
			bad[key] = true
		}
		last[key] = i
		mu.Unlock()
		time.Sleep(work)
		mu.Lock()
		defer mu.Unlock()
		inHandler--
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
		t.Fatalf("%d of %d messages handled in 60s", handled, n)
	}
	require.NoError(t, router.Close())
	require.NoError(t, <-ran)
	<-closed
	mu.Lock()
	defer mu.Unlock()
	r := result{rate: float64(n-1) / done.Sub(first).Seconds(), maxKeys: most}
	for k := range bad {
		r.outOfOrder = append(r.outOfOrder, k)
	}
	return r
}

// TestOrderAndThroughputOnWatermillKafka consumes 400 messages over 32 keys
// and 4 partitions, a 2ms handler, three ways, and asserts each key's order
// in each: watermill-kafka waits for each message's Ack per partition, so
// the durable decorator keeps order with the parallelism the partitions
// give (no more), and only WithAckOnReceive (at most once: the offset is
// committed before the handler ran) adds keys in parallel. The rates are
// logged; the README's table quotes them (go test -v).
func TestOrderAndThroughputOnWatermillKafka(t *testing.T) {
	const n = 400
	c := startCluster(t, n)
	for _, v := range []struct {
		name string
		opts []seqwatermill.Option
	}{
		{"plain Router", nil},
		{"Router + seqwatermill", []seqwatermill.Option{}},
		{"Router + seqwatermill, WithAckOnReceive (not durable)", []seqwatermill.Option{seqwatermill.WithAckOnReceive()}},
	} {
		r := run(t, c, n, "g-"+strconv.Itoa(len(v.opts))+v.name[:6]+strconv.Itoa(int(time.Now().UnixNano()%1e6)), v.opts)
		require.Empty(t, r.outOfOrder, "%s: keys out of order", v.name)
		t.Logf("%-55s %7.0f msgs/s, at most %d in the handler at once", v.name, r.rate, r.maxKeys)
	}
}

// closeSignal closes closed once its subscriber's Close returned.
type closeSignal struct {
	message.Subscriber
	closed chan struct{}
}

func (c closeSignal) Close() error {
	defer close(c.closed)
	return c.Subscriber.Close()
}
