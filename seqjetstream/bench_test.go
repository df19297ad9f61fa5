package seqjetstream_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/seqsched/seqsched/seqjetstream"
)

// The benchmarks run on an embedded nats-server, in this process. One op
// is one full consumption of a stream published beforehand, by fresh
// durable consumers, from creating them to the last message handled.
// Handler latencies are fixed per stream sequence, so every run and every
// implementation sees the same ones. Run them with
//
//	go test -run '^$' -bench . -benchtime 1x -count 3 .
//
// and see BENCHMARKS.md for the numbers.

const benchPartitions = 8

// latencyOf is the handler latency of stream sequence seq: uniform in
// [0, 5ms].
func latencyOf(seq uint64) time.Duration {
	h := fnv.New64a()
	fmt.Fprint(h, seq)
	return time.Duration(h.Sum64() % uint64(5*time.Millisecond+1))
}

// benchStream starts a server with stream "B": subjects in.<key>, stored
// as p.<partition>.<key> over benchPartitions partitions, holding n
// messages over keys keys.
func benchStream(b *testing.B, n, keys int) (jetstream.JetStream, jetstream.Stream) {
	_, js := connect(b, startServer(b))
	s := newStream(b, js, jetstream.StreamConfig{
		Name: "B", Subjects: []string{"in.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source: "in.*", Destination: fmt.Sprintf("p.{{partition(%d,1)}}.{{wildcard(1)}}", benchPartitions),
		},
	})
	var futures []jetstream.PubAckFuture
	for i := range n {
		f, err := js.PublishAsync(fmt.Sprint("in.k", i%keys), []byte("x"))
		if err != nil {
			b.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	return js, s
}

var benchName atomic.Int64

// partitionConsumers creates one fresh durable consumer per partition.
func partitionConsumers(b *testing.B, s jetstream.Stream, maxAckPending int) []jetstream.Consumer {
	id := benchName.Add(1)
	var cons []jetstream.Consumer
	for p := range benchPartitions {
		cons = append(cons, newConsumer(b, s, jetstream.ConsumerConfig{
			Durable: fmt.Sprintf("c%d-%d", id, p), FilterSubject: fmt.Sprintf("p.%d.*", p), MaxAckPending: maxAckPending,
		}))
	}
	return cons
}

// consumeOrdered consumes n messages with one seqjetstream.Consumer of cons
// and returns once the last one is acknowledged.
func consumeOrdered(b *testing.B, cons []jetstream.Consumer, n int, h seqjetstream.Handler, opts ...seqjetstream.Option) {
	all := make(chan struct{})
	var done atomic.Int64
	c, err := seqjetstream.NewConsumer(cons, func(ctx context.Context, m jetstream.Msg) error {
		err := h(ctx, m)
		if done.Add(1) == int64(n) {
			close(all)
		}
		return err
	}, opts...)
	if err != nil {
		b.Fatal(err)
	}
	r := start(b, c)
	<-all
	if err := r.close(b, 10*time.Second); err != nil {
		b.Fatal(err)
	}
	if got := c.Stats().Acked; got != uint64(n) {
		b.Fatalf("acked %d; want %d", got, n)
	}
}

// consumePlain consumes n messages with the loop NATS users write: per
// consumer, one goroutine fetching and handling its messages in turn, then
// acknowledging each.
func consumePlain(b *testing.B, cons []jetstream.Consumer, n int, h func(jetstream.Msg)) {
	var done atomic.Int64
	var wg sync.WaitGroup
	for _, cn := range cons {
		wg.Go(func() {
			for done.Load() < int64(n) {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				batch, err := cn.Fetch(1000, jetstream.FetchContext(ctx))
				if err != nil {
					cancel()
					b.Error(err)
					return
				}
				for m := range batch.Messages() {
					h(m)
					if err := m.Ack(); err != nil {
						b.Error(err)
					}
					done.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
}

func sleepFor(m jetstream.Msg) {
	meta, _ := m.Metadata()
	time.Sleep(latencyOf(meta.Sequence.Stream))
}

// BenchmarkThroughput: messages per second with handlers of 0–5 ms, for
// seqjetstream (one instance, one plain consumer per partition,
// concurrency 100) and for the answer NATS users have today, one consumer
// per partition with MaxAckPending=1 and a goroutine each.
func BenchmarkThroughput(b *testing.B) {
	for _, keys := range []int{1, 100, 10000} {
		n := 10000
		if keys == 1 {
			n = 2000 // one key runs one message at a time: about 6 s
		}
		js, s := benchStream(b, n, keys)
		_ = js
		b.Run(fmt.Sprintf("impl=seqsched/keys=%d", keys), func(b *testing.B) {
			for b.Loop() {
				t0 := time.Now()
				consumeOrdered(b, partitionConsumers(b, s, 1000), n, func(_ context.Context, m jetstream.Msg) error {
					sleepFor(m)
					return nil
				}, seqjetstream.WithMaxConcurrency(100), seqjetstream.WithLogger(discard))
				b.ReportMetric(float64(n)/time.Since(t0).Seconds(), "msg/s")
			}
		})
		b.Run(fmt.Sprintf("impl=partition-per-consumer/keys=%d", keys), func(b *testing.B) {
			for b.Loop() {
				t0 := time.Now()
				consumePlain(b, partitionConsumers(b, s, 1), n, sleepFor)
				b.ReportMetric(float64(n)/time.Since(t0).Seconds(), "msg/s")
			}
		})
	}
}

// BenchmarkOverhead: the cost per message, with an empty handler, of
// seqjetstream against a plain Fetch loop on one consumer (both ack
// every message, and both pay the embedded server's share, which runs in
// this process). 20,000 messages over 1,000 keys per op.
func BenchmarkOverhead(b *testing.B) {
	const n = 20000
	_, js := connect(b, startServer(b))
	s := newStream(b, js, jetstream.StreamConfig{Name: "B", Subjects: []string{"k.*"}})
	var futures []jetstream.PubAckFuture
	for i := range n {
		f, err := js.PublishAsync(fmt.Sprint("k.", i%1000), []byte("x"))
		if err != nil {
			b.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		<-f.Ok()
	}
	one := func() []jetstream.Consumer {
		return []jetstream.Consumer{newConsumer(b, s, jetstream.ConsumerConfig{Durable: fmt.Sprint("o", benchName.Add(1))})}
	}
	measure := func(b *testing.B, consume func()) {
		var ms0, ms1 runtime.MemStats
		for b.Loop() {
			runtime.ReadMemStats(&ms0)
			t0 := time.Now()
			consume()
			d := time.Since(t0)
			runtime.ReadMemStats(&ms1)
			b.ReportMetric(float64(d.Nanoseconds())/n, "ns/msg")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/msg")
		}
	}
	b.Run("impl=plain-fetch", func(b *testing.B) {
		measure(b, func() { consumePlain(b, one(), n, func(jetstream.Msg) {}) })
	})
	b.Run("impl=seqsched", func(b *testing.B) {
		measure(b, func() {
			consumeOrdered(b, one(), n, func(context.Context, jetstream.Msg) error { return nil })
		})
	})
}
