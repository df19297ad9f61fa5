package seqjetstream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seqsched/seqsched/seqjetstream"
)

// Messages of one subject run one at a time, in stream order; subjects run
// in parallel. Close waits for the running handlers and acknowledges them.
func Example() {
	js, stop := embedded() // a nats-server with JetStream in this process
	defer stop()
	ctx := context.Background()
	stream, _ := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.*"}})
	cons, _ := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
	})

	var mu sync.Mutex
	seen := map[string][]string{}
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, func(ctx context.Context, msg jetstream.Msg) error {
		mu.Lock() // for seen only: one subject's messages never overlap
		defer mu.Unlock()
		seen[msg.Subject()] = append(seen[msg.Subject()], string(msg.Data()))
		return nil
	}, seqjetstream.WithMaxConcurrency(16))
	if err != nil {
		fmt.Println(err)
		return
	}
	go c.Run(ctx)

	for i := 1; i <= 3; i++ {
		js.Publish(ctx, "orders.alice", fmt.Appendf(nil, "alice-%d", i))
		js.Publish(ctx, "orders.bob", fmt.Appendf(nil, "bob-%d", i))
	}
	waitFor(func() bool { return c.Stats().Acked == 6 })
	c.Close(ctx)

	fmt.Println(seen["orders.alice"])
	fmt.Println(seen["orders.bob"])
	// Output:
	// [alice-1 alice-2 alice-3]
	// [bob-1 bob-2 bob-3]
}

// A partitioned stream keeps key order across instances: every instance
// gets every partition's pinned consumer, the server pins each partition to
// one instance at a time, and a new owner catches up before it runs
// anything.
func Example_partitioned() {
	js, stop := embedded()
	defer stop()
	ctx := context.Background()
	stream, _ := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "EVENTS",
		Subjects: []string{"events.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{ // events.<key> → part.<0..3>.<key>
			Source: "events.*", Destination: "part.{{partition(4,1)}}.{{wildcard(1)}}",
		},
	})
	var cons []jetstream.Consumer
	for p := range 4 {
		cn, _ := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:        fmt.Sprintf("part-%d", p),
			FilterSubject:  fmt.Sprintf("part.%d.*", p),
			AckPolicy:      jetstream.AckExplicitPolicy,
			PriorityPolicy: jetstream.PriorityPolicyPinned, // one instance at a time
			PriorityGroups: []string{"owners"},
			PinnedTTL:      10 * time.Second, // how long a silent owner keeps its partitions
		})
		cons = append(cons, cn)
	}

	var mu sync.Mutex
	var got []string
	c, _ := seqjetstream.NewConsumer(cons, func(ctx context.Context, msg jetstream.Msg) error {
		if strings.HasSuffix(msg.Subject(), ".k7") {
			mu.Lock()
			got = append(got, string(msg.Data()))
			mu.Unlock()
		}
		return nil
	}, seqjetstream.WithHandover(js)) // Close unpins: a standby takes over at once
	go c.Run(ctx)
	for i := range 100 {
		js.Publish(ctx, fmt.Sprintf("events.k%d", i%10), fmt.Appendf(nil, "%d", i))
	}
	waitFor(func() bool { return c.Stats().Acked == 100 })
	c.Close(ctx)

	owned := 0
	for _, cs := range c.Stats().Consumers {
		if cs.Pinned && cs.Acked > 0 {
			owned++
		}
	}
	fmt.Println("partitions served:", owned)
	fmt.Println("k7 in order:", got)
	// Output:
	// partitions served: 4
	// k7 in order: [7 17 27 37 47 57 67 77 87 97]
}

// A handler marks an error as not worth retrying with Terminal: the
// message goes to the dead-letter function at once and is terminated, and
// its key goes on.
func ExampleTerminal() {
	js, stop := embedded()
	defer stop()
	ctx := context.Background()
	stream, _ := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.*"}})
	cons, _ := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy})

	c, _ := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, func(ctx context.Context, msg jetstream.Msg) error {
		if !strings.HasPrefix(string(msg.Data()), "{") {
			return seqjetstream.Terminal(errors.New("not JSON"))
		}
		fmt.Println("applied", string(msg.Data()))
		return nil
	}, seqjetstream.WithDeadLetter(func(ctx context.Context, msg jetstream.Msg, attempts int, err error) error {
		fmt.Printf("dead-lettered %q after %d attempt: %v\n", msg.Data(), attempts, err)
		return nil
	}))
	go c.Run(ctx)
	js.Publish(ctx, "orders.alice", []byte("garbage"))
	js.Publish(ctx, "orders.alice", []byte(`{"total":5}`))
	waitFor(func() bool { return c.Stats().Acked == 1 })
	c.Close(ctx)
	// Output:
	// dead-lettered "garbage" after 1 attempt: not JSON
	// applied {"total":5}
}

// DeadLetterSubject publishes each failed message to a subject stored by a
// dead-letter stream, with where it came from and why it failed.
func ExampleDeadLetterSubject() {
	js, stop := embedded()
	defer stop()
	ctx := context.Background()
	stream, _ := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.*"}})
	js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.orders"}})
	cons, _ := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy})

	dlq, err := seqjetstream.DeadLetterSubject(js, "dlq.orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	c, _ := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, func(ctx context.Context, msg jetstream.Msg) error {
		return errors.New("payment service down")
	}, seqjetstream.WithRetries(2, func(context.Context, jetstream.Msg, int, error) time.Duration {
		return 10 * time.Millisecond
	}), seqjetstream.WithDeadLetter(dlq))
	go c.Run(ctx)
	js.Publish(ctx, "orders.alice", []byte("order-1"))
	waitFor(func() bool { return c.Stats().Termed == 1 })
	c.Close(ctx)

	dead, _ := js.OrderedConsumer(ctx, "DLQ", jetstream.OrderedConsumerConfig{})
	m, _ := dead.Next()
	h := m.Headers()
	fmt.Println(string(m.Data()), h.Get(seqjetstream.HeaderSubject), h.Get(seqjetstream.HeaderStream),
		h.Get(seqjetstream.HeaderSequence), h.Get(seqjetstream.HeaderAttempts), h.Get(seqjetstream.HeaderError))
	// Output:
	// order-1 orders.alice ORDERS 1 2 payment service down
}

// Stats is plain data for a metrics exporter: counters, gauges, and
// handler and queue times in the buckets of seqsched.HistogramBounds.
func ExampleConsumer_Stats() {
	js, stop := embedded()
	defer stop()
	ctx := context.Background()
	stream, _ := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.*"}})
	cons, _ := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy})

	c, _ := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, func(ctx context.Context, msg jetstream.Msg) error {
		if seqjetstream.Attempt(ctx) == 1 && string(msg.Data()) == "flaky" {
			return errors.New("timeout")
		}
		return nil
	}, seqjetstream.WithRetries(3, func(context.Context, jetstream.Msg, int, error) time.Duration { return time.Millisecond }))
	go c.Run(ctx)
	for _, body := range []string{"ok", "flaky", "ok"} {
		js.Publish(ctx, "orders.alice", []byte(body))
	}
	waitFor(func() bool { return c.Stats().Acked == 3 })
	c.Close(ctx)

	st := c.Stats()
	fmt.Println("received", st.Received, "acked", st.Acked, "retries", st.Retries, "termed", st.Termed)
	fmt.Println("handler attempts timed", st.HandlerTime.Count, "queue times", st.QueueTime.Count)
	cs := st.Consumers[0]
	fmt.Println(cs.Stream, cs.Consumer, "buffered", cs.Buffered, "remembered", cs.Remembered)
	// Output:
	// received 3 acked 3 retries 1 termed 0
	// handler attempts timed 4 queue times 3
	// ORDERS billing buffered 0 remembered 3
}

// embedded starts a nats-server with JetStream in this process and
// connects to it; stop shuts both down.
func embedded() (jetstream.JetStream, func()) {
	dir, _ := os.MkdirTemp("", "seqsched-jetstream-example")
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		panic(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("nats-server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	js, _ := jetstream.New(nc)
	return js, func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}
}

// waitFor waits, up to 20s, for cond.
func waitFor(cond func() bool) {
	for deadline := time.Now().Add(20 * time.Second); !cond() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// An interceptor wraps every handler call: here it logs each attempt and
// its outcome; oteljetstream's Tracing makes a span of it.
func ExampleWithInterceptor() {
	js, stop := embedded() // a nats-server with JetStream in this process
	defer stop()
	ctx := context.Background()
	stream, _ := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.*"}})
	cons, _ := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
	})

	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, func(ctx context.Context, msg jetstream.Msg) error {
		if seqjetstream.Attempt(ctx) == 1 {
			return errors.New("database busy")
		}
		return nil
	}, seqjetstream.WithRetries(3, func(context.Context, jetstream.Msg, int, error) time.Duration { return 0 }),
		seqjetstream.WithInterceptor(func(ctx context.Context, msg jetstream.Msg, next func(context.Context) error) error {
			err := next(ctx)
			fmt.Printf("%s %s, attempt %d: %v\n", msg.Subject(), msg.Data(), seqjetstream.Attempt(ctx), err)
			return err
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	go c.Run(ctx)

	js.Publish(ctx, "orders.alice", []byte("+10"))
	waitFor(func() bool { return c.Stats().Acked == 1 })
	c.Close(ctx)
	// Output:
	// orders.alice +10, attempt 1: database busy
	// orders.alice +10, attempt 2: <nil>
}
