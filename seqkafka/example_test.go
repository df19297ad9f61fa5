package seqkafka_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqsched/seqsched/seqkafka"
)

// exampleCluster starts an in-process cluster with topic "orders" holding
// the given (key, value) records on one partition.
func exampleCluster(kv ...string) (*kfake.Cluster, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		c.Close()
		return nil, err
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i := 0; i+1 < len(kv); i += 2 {
		rs = append(rs, &kgo.Record{Topic: "orders", Key: []byte(kv[i]), Value: []byte(kv[i+1])})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Records of one key are handled in offset order; different keys in
// parallel. The consumer commits only what is done.
func Example() {
	c, err := exampleCluster("alice", "+10", "bob", "+5", "alice", "-3", "bob", "-1", "alice", "+1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	var mu sync.Mutex
	seen := map[string][]string{}
	handled := make(chan struct{}, 5)
	cons, err := seqkafka.NewConsumer([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, func(ctx context.Context, r *kgo.Record) error {
		mu.Lock()
		seen[string(r.Key)] = append(seen[string(r.Key)], string(r.Value))
		mu.Unlock()
		handled <- struct{}{}
		return nil
	}, seqkafka.WithMaxConcurrency(8))
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(context.Background()) }()
	for range 5 {
		<-handled
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println("close:", cons.Close(ctx), "run:", <-ran)
	for _, k := range slices.Sorted(maps.Keys(seen)) {
		fmt.Println(k, seen[k])
	}
	fmt.Println("processed:", cons.Stats().Processed)
	// Output:
	// close: <nil> run: <nil>
	// alice [+10 -3 +1]
	// bob [+5 -1]
	// processed: 5
}

// A record that fails every attempt goes to the dead-letter handler,
// without holding up other keys; its key's later records wait for it.
func ExampleWithDeadLetter() {
	c, err := exampleCluster("a", "poison", "a", "after", "b", "fine")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	var mu sync.Mutex
	byKey := map[string][]string{}
	done := make(chan struct{}, 3)
	note := func(key, s string) {
		mu.Lock()
		byKey[key] = append(byKey[key], s)
		mu.Unlock()
		done <- struct{}{}
	}
	cons, err := seqkafka.NewConsumer([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, func(ctx context.Context, r *kgo.Record) error {
		if string(r.Value) == "poison" {
			return errors.New("cannot parse")
		}
		note(string(r.Key), string(r.Value))
		return nil
	},
		seqkafka.WithRetries(3, func(context.Context, *kgo.Record, int, error) time.Duration { return time.Millisecond }),
		seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
			note(string(r.Key), fmt.Sprintf("dead-lettered %q: %v", r.Value, err))
			return nil
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(context.Background()) }()
	for range 3 {
		<-done
	}
	if err := cons.Close(context.Background()); err != nil {
		fmt.Println(err)
	}
	<-ran
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		fmt.Printf("%s: %q\n", k, byKey[k])
	}
	s := cons.Stats()
	fmt.Println("retries:", s.Retries, "dead-lettered:", s.DeadLettered)
	// Output:
	// a: ["dead-lettered \"poison\": cannot parse" "after"]
	// b: ["fine"]
	// retries: 2 dead-lettered: 1
}

// exampleOpts are the client options of the examples' consumers.
func exampleOpts(c *kfake.Cluster, group string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
}

// A batch holds at most one record per key: the key's next record waits
// for the batch, so each key's records are still handled in order.
func ExampleNewBatchConsumer() {
	c, err := exampleCluster("alice", "+10", "bob", "+5", "alice", "-3", "carol", "+1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	done := make(chan struct{}, 4)
	cons, err := seqkafka.NewBatchConsumer(exampleOpts(c, "batches"), func(ctx context.Context, rs []*kgo.Record) error {
		rs = slices.SortedFunc(slices.Values(rs), func(a, b *kgo.Record) int { return int(a.Offset - b.Offset) })
		fmt.Print("insert")
		for _, r := range rs { // one bulk insert of the batch
			fmt.Printf(" %s:%s", r.Key, r.Value)
			done <- struct{}{}
		}
		fmt.Println()
		return nil
	}, seqkafka.WithBatch(100, 300*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(context.Background()) }()
	for range 4 {
		<-done
	}
	fmt.Println("close:", cons.Close(context.Background()), "run:", <-ran)
	// Output:
	// insert alice:+10 bob:+5 carol:+1
	// insert alice:-3
	// close: <nil> run: <nil>
}

// The wait before a retry can depend on the record and the error; an
// error marked Terminal is not retried.
func ExampleWithRetries() {
	c, err := exampleCluster("a", "flaky", "a", "bad")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	done := make(chan struct{}, 2)
	cons, err := seqkafka.NewConsumer(exampleOpts(c, "backoff"), func(ctx context.Context, r *kgo.Record) error {
		switch {
		case string(r.Value) == "bad":
			return seqkafka.Terminal(errors.New("bad input"))
		case seqkafka.Attempt(ctx) < 3:
			return errors.New("busy")
		}
		fmt.Printf("%s handled at attempt %d\n", r.Value, seqkafka.Attempt(ctx))
		done <- struct{}{}
		return nil
	},
		seqkafka.WithRetries(5, func(ctx context.Context, r *kgo.Record, attempt int, err error) time.Duration {
			fmt.Printf("%s failed attempt %d: %v\n", r.Value, attempt, err)
			return time.Duration(attempt) * time.Millisecond
		}),
		seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
			fmt.Printf("%s dead-lettered after %d attempt: %v\n", r.Value, attempts, err)
			done <- struct{}{}
			return nil
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(context.Background()) }()
	<-done
	<-done
	fmt.Println("close:", cons.Close(context.Background()), "run:", <-ran)
	// Output:
	// flaky failed attempt 1: busy
	// flaky failed attempt 2: busy
	// flaky handled at attempt 3
	// bad dead-lettered after 1 attempt: bad input
	// close: <nil> run: <nil>
}

// Pause stops taking records, for example while the database the handler
// writes to is down, and keeps the consumer in its group; Resume goes on.
func ExampleConsumer_Pause() {
	c, err := exampleCluster("a", "1", "b", "2")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	var handled atomic.Int32
	done := make(chan struct{}, 2)
	cons, err := seqkafka.NewConsumer(exampleOpts(c, "pause"), func(ctx context.Context, r *kgo.Record) error {
		handled.Add(1)
		done <- struct{}{}
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	cons.Pause() // before Run: nothing is taken until Resume
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(context.Background()) }()
	fmt.Println("paused:", cons.Stats().Paused, "handled:", handled.Load())
	cons.Resume()
	<-done
	<-done
	fmt.Println("paused:", cons.Stats().Paused, "handled:", handled.Load())
	fmt.Println("close:", cons.Close(context.Background()), "run:", <-ran)
	// Output:
	// paused: true handled: 0
	// paused: false handled: 2
	// close: <nil> run: <nil>
}

// With no room for metadata, the commit is the bare watermark: a new owner
// replays every record above it, done or not. Set WithMaxMetadataBytes to
// the brokers' offset.metadata.max.bytes when it is below 4,096.
func ExampleWithMaxMetadataBytes() {
	c, err := exampleCluster("stuck", "0", "a", "1", "b", "2")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	handled := make(chan int64, 3)
	first, err := seqkafka.NewConsumer(exampleOpts(c, "metadata"), func(ctx context.Context, r *kgo.Record) error {
		if r.Offset == 0 {
			<-ctx.Done() // stuck until Close gives up
			return ctx.Err()
		}
		handled <- r.Offset
		return nil
	}, seqkafka.WithMaxMetadataBytes(0))
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan error, 1)
	go func() { ran <- first.Run(context.Background()) }()
	<-handled
	<-handled
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	fmt.Println("first close:", first.Close(ctx), "run:", <-ran)

	var mu sync.Mutex
	var replayed []int64
	second, err := seqkafka.NewConsumer(exampleOpts(c, "metadata"), func(ctx context.Context, r *kgo.Record) error {
		mu.Lock()
		replayed = append(replayed, r.Offset)
		mu.Unlock()
		handled <- r.Offset
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { ran <- second.Run(context.Background()) }()
	for range 3 {
		<-handled
	}
	fmt.Println("second close:", second.Close(context.Background()), "run:", <-ran)
	slices.Sort(replayed)
	fmt.Println("replayed:", replayed)
	// Output:
	// first close: context deadline exceeded run: <nil>
	// second close: <nil> run: <nil>
	// replayed: [0 1 2]
}

// Stats is plain data for an exporter to read at scrape time (the
// seqprom/promkafka and seqotel/otelkafka modules do): counters that only grow
// over the consumer's life, gauges, and for each assigned partition where
// the consumer stands against the log (committed, watermark, lag).
func ExampleConsumer_Stats() {
	c, err := exampleCluster("a", "1", "b", "2", "a", "3")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	done := make(chan struct{}, 3)
	cons, err := seqkafka.NewConsumer(exampleOpts(c, "stats"), func(ctx context.Context, r *kgo.Record) error {
		done <- struct{}{}
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(context.Background()) }()
	for range 3 {
		<-done
	}
	fmt.Println("close:", cons.Close(context.Background()), "run:", <-ran)
	st := cons.Stats()
	fmt.Println("processed:", st.Processed, "buffered:", st.Buffered, "handler calls:", st.HandlerTime.Count)
	fmt.Println("assigned partitions after Close:", len(st.Partitions))
	// Output:
	// close: <nil> run: <nil>
	// processed: 3 buffered: 0 handler calls: 3
	// assigned partitions after Close: 0
}

// An interceptor wraps every handler call: here it logs each attempt and
// its outcome; otelkafka's Tracing makes a span of it.
func ExampleWithInterceptor() {
	c, err := exampleCluster("alice", "+10")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	done := make(chan struct{})
	cons, err := seqkafka.NewConsumer([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, func(ctx context.Context, r *kgo.Record) error {
		if seqkafka.Attempt(ctx) == 1 {
			return errors.New("database busy")
		}
		return nil
	}, seqkafka.WithRetries(3, func(context.Context, *kgo.Record, int, error) time.Duration { return 0 }),
		seqkafka.WithInterceptor(func(ctx context.Context, r *kgo.Record, next func(context.Context) error) error {
			err := next(ctx)
			fmt.Printf("%s %s, attempt %d: %v\n", r.Key, r.Value, seqkafka.Attempt(ctx), err)
			if err == nil {
				close(done)
			}
			return err
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(context.Background()) }()
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println("close:", cons.Close(ctx), "run:", <-ran)
	// Output:
	// alice +10, attempt 1: database busy
	// alice +10, attempt 2: <nil>
	// close: <nil> run: <nil>
}
