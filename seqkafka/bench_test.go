package seqkafka_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqsched/seqsched/seqkafka"
)

// The benchmarks follow parallel-consumer's published setup: 10,000
// records on one partition, a handler of 0-5 ms uniformly random (by
// offset, so every run and both consumers see the same latencies),
// concurrency 100. One op is one full consumption of the topic by a fresh
// group, from joining to the last record handled. Run them with
//
//	go test -run '^$' -bench . -benchtime 1x -count 3 ./kafka/
//
// and see BENCHMARKS.md for the numbers and the targets.

const benchRecords = 10000

// latencyOf is the handler latency of offset o: uniform in [0, 5ms].
func latencyOf(o int64) time.Duration {
	h := fnv.New64a()
	fmt.Fprint(h, o)
	return time.Duration(h.Sum64() % uint64(5*time.Millisecond+1))
}

func benchCluster(b *testing.B, n, keys int) *kfake.Cluster {
	c := cluster(b, 1)
	const batch = 20000
	for start := 0; start < n; start += batch {
		rs := make([]*kgo.Record, 0, batch)
		for i := start; i < min(n, start+batch); i++ {
			rs = append(rs, rec(0, fmt.Sprint("k", i%keys), ""))
		}
		produce(b, c, rs)
	}
	return c
}

var benchGroup atomic.Int64

// consumeOrdered consumes all n records of c with a fresh group of one
// seqkafka.Consumer and returns when the last one was handled.
func consumeOrdered(b *testing.B, c *kfake.Cluster, n int, h seqkafka.Handler, opts ...seqkafka.Option) *seqkafka.Consumer {
	return consumeOrderedWatch(b, c, n, nil, h, opts...)
}

// consumeOrderedWatch is consumeOrdered, storing the consumer in cur (when
// not nil) before it starts.
func consumeOrderedWatch(b *testing.B, c *kfake.Cluster, n int, cur *atomic.Pointer[seqkafka.Consumer], h seqkafka.Handler, opts ...seqkafka.Option) *seqkafka.Consumer {
	var done atomic.Int64
	all := make(chan struct{})
	group := fmt.Sprint("bench-", benchGroup.Add(1))
	cons, err := seqkafka.NewConsumer(groupOpts(c, kgo.ConsumerGroup(group)), func(ctx context.Context, r *kgo.Record) error {
		err := h(ctx, r)
		if done.Add(1) == int64(n) {
			close(all)
		}
		return err
	}, opts...)
	if err != nil {
		b.Fatal(err)
	}
	if cur != nil {
		cur.Store(cons)
	}
	m := startMember(b, cons)
	<-all
	if err := m.close(b, 10*time.Second); err != nil {
		b.Fatal(err)
	}
	return cons
}

// consumePerPartition is the baseline: the usual franz-go consumer with
// one goroutine per partition handling its records one after another.
func consumePerPartition(b *testing.B, c *kfake.Cluster, n int, h seqkafka.Handler) {
	group := fmt.Sprint("bench-", benchGroup.Add(1))
	cl, err := kgo.NewClient(groupOpts(c, kgo.ConsumerGroup(group), kgo.DisableAutoCommit())...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	workers := map[int32]chan []*kgo.Record{}
	var wg sync.WaitGroup
	var batches sync.WaitGroup
	seen := 0
	for seen < n {
		fs := cl.PollFetches(ctx)
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			ch := workers[p.Partition]
			if ch == nil {
				ch = make(chan []*kgo.Record)
				workers[p.Partition] = ch
				wg.Go(func() {
					for rs := range ch {
						for _, r := range rs {
							_ = h(ctx, r)
						}
						batches.Done()
					}
				})
			}
			seen += len(p.Records)
			batches.Add(1)
			ch <- p.Records
		})
		batches.Wait()
	}
	for _, ch := range workers {
		close(ch)
	}
	wg.Wait()
}

func sleepHandler(_ context.Context, r *kgo.Record) error {
	time.Sleep(latencyOf(r.Offset)) // the handler's work
	return nil
}

func reportRate(b *testing.B, n int) {
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkKeyOrdered measures a seqkafka.Consumer at concurrency 100 with
// 1, 10, 100 and 10,000 keys. Besides the whole op (join included) it
// reports the time from the first record's handler starting to the last
// one's ending, which excludes the group join.
func BenchmarkKeyOrdered(b *testing.B) {
	for _, keys := range []int{1, 10, 100, 10000} {
		b.Run(fmt.Sprint("keys=", keys), func(b *testing.B) {
			c := benchCluster(b, benchRecords, keys)
			var processing, busy time.Duration
			for b.Loop() {
				var first, last, inHandler atomic.Int64
				consumeOrdered(b, c, benchRecords, func(ctx context.Context, r *kgo.Record) error {
					start := time.Now()
					first.CompareAndSwap(0, start.UnixNano())
					err := sleepHandler(ctx, r)
					end := time.Now()
					inHandler.Add(int64(end.Sub(start)))
					last.Store(end.UnixNano())
					return err
				}, seqkafka.WithMaxConcurrency(100))
				processing += time.Duration(last.Load() - first.Load())
				busy += time.Duration(inHandler.Load())
			}
			reportRate(b, benchRecords)
			b.ReportMetric(processing.Seconds()/float64(b.N), "s-first-to-last")
			// The ideal with the handler times this machine really gave:
			// their sum over the concurrency (or over the keys, when fewer).
			b.ReportMetric(busy.Seconds()/float64(b.N)/float64(min(100, keys)), "s-ideal")
		})
	}
}

// BenchmarkPerPartition is the baseline on the same data: one goroutine
// for the one partition. Keys do not matter to it.
func BenchmarkPerPartition(b *testing.B) {
	c := benchCluster(b, benchRecords, 1)
	for b.Loop() {
		consumePerPartition(b, c, benchRecords, sleepHandler)
	}
	reportRate(b, benchRecords)
}

// BenchmarkNoopOverhead measures the cost per record with a handler that
// does nothing, for the consumer and for the baseline (which is franz-go's
// own fetch cost plus a loop): the difference is the consumer's overhead.
func BenchmarkNoopOverhead(b *testing.B) {
	const n = 100000
	noop := func(context.Context, *kgo.Record) error { return nil }
	for _, name := range []string{"consumer", "franz-go"} {
		b.Run(name, func(b *testing.B) {
			c := benchCluster(b, n, 1000)
			for b.Loop() {
				if name == "consumer" {
					consumeOrdered(b, c, n, noop, seqkafka.WithMaxConcurrency(100))
				} else {
					consumePerPartition(b, c, n, noop)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*b.N), "ns/record")
		})
	}
}

// BenchmarkLagMemory consumes a backlog of 100,000 and of 1,000,000
// records with a buffer limit of 1,000 and reports the largest buffer the
// consumer held and the peak heap growth over the heap after producing
// (the cluster's own copy of the records is in this process, before that
// baseline). Bounded memory shows as the same growth for both lags.
func BenchmarkLagMemory(b *testing.B) {
	for _, n := range []int{100000, 1000000} {
		b.Run(fmt.Sprint("lag=", n), func(b *testing.B) {
			c := benchCluster(b, n, 50000)
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var peakHeap atomic.Uint64
			var maxBuffered atomic.Int64
			var cur atomic.Pointer[seqkafka.Consumer]
			h := func(_ context.Context, r *kgo.Record) error {
				if r.Offset%1000 == 0 {
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					if ms.HeapInuse > peakHeap.Load() {
						peakHeap.Store(ms.HeapInuse)
					}
					if cons := cur.Load(); cons != nil {
						if s := int64(cons.Stats().Buffered); s > maxBuffered.Load() {
							maxBuffered.Store(s)
						}
					}
				}
				return nil
			}
			for b.Loop() {
				consumeOrderedWatch(b, c, n, &cur, h, seqkafka.WithMaxConcurrency(100), seqkafka.WithMaxBuffered(1000, 500))
			}
			b.ReportMetric(float64(int64(peakHeap.Load())-int64(before.HeapInuse))/(1<<20), "peak-heap-growth-MiB")
			b.ReportMetric(float64(maxBuffered.Load()), "max-buffered")
		})
	}
}

// bulkDB stands for a database behind a pool of 8 connections where a
// write costs a 1ms round trip plus 20µs per row: the kind of handler
// batches are for.
type bulkDB struct{ pool chan struct{} }

func newBulkDB() *bulkDB { return &bulkDB{pool: make(chan struct{}, 8)} }

func (db *bulkDB) insert(rows int) {
	db.pool <- struct{}{}
	time.Sleep(time.Millisecond + time.Duration(rows)*20*time.Microsecond) // the write, not synchronisation
	<-db.pool
}

// BenchmarkBulkInsert consumes 20,000 records of 1,000 keys into bulkDB,
// one row per handler call (seqkafka.NewConsumer) or one bulk insert per
// batch of up to 100 (seqkafka.NewBatchConsumer), both at concurrency 8 (the
// pool's size; more only queues on the pool).
func BenchmarkBulkInsert(b *testing.B) {
	const n = 20000
	for _, mode := range []string{"per-record", "batch=100"} {
		b.Run(mode, func(b *testing.B) {
			c := benchCluster(b, n, 1000)
			var processing time.Duration
			for b.Loop() {
				db := newBulkDB()
				var done, first atomic.Int64
				all := make(chan struct{})
				count := func(k int) {
					first.CompareAndSwap(0, time.Now().UnixNano())
					if done.Add(int64(k)) == n {
						processing += time.Since(time.Unix(0, first.Load()))
						close(all)
					}
				}
				group := fmt.Sprint("bench-", benchGroup.Add(1))
				opts := groupOpts(c, kgo.ConsumerGroup(group))
				var cons *seqkafka.Consumer
				var err error
				if mode == "per-record" {
					cons, err = seqkafka.NewConsumer(opts, func(_ context.Context, r *kgo.Record) error {
						db.insert(1)
						count(1)
						return nil
					}, seqkafka.WithMaxConcurrency(8))
				} else {
					cons, err = seqkafka.NewBatchConsumer(opts, func(_ context.Context, rs []*kgo.Record) error {
						db.insert(len(rs))
						count(len(rs))
						return nil
					}, seqkafka.WithMaxConcurrency(8), seqkafka.WithBatch(100, 5*time.Millisecond), seqkafka.WithMaxBuffered(2000, 1000))
				}
				if err != nil {
					b.Fatal(err)
				}
				m := startMember(b, cons)
				<-all
				if err := m.close(b, 10*time.Second); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b, n)
			// Without the group join: from the first write's end to the last's.
			b.ReportMetric(float64(n)*float64(b.N)/processing.Seconds(), "records/s-processing")
		})
	}
}
