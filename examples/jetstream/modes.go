package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seqsched/seqsched/seqjetstream"
)

// env is what the runs share: the parameters, the server and the stream.
// Each run creates its own consumers, named after it, so that each reads
// the whole stream.
type env struct {
	p      params
	url    string
	js     jetstream.JetStream
	stream jetstream.Stream
}

// result is what the ordered run reports.
type result struct {
	elapsed     time.Duration
	killed      string
	killedAt    int
	killedOwned int
	layouts     []string // each instance's partitions, at each change
}

// instance is one consumer process of the ordered run: its own
// connection and its own seqjetstream.Consumer of every partition.
type instance struct {
	id   int
	name string
	nc   *nats.Conn
	c    *seqjetstream.Consumer
	done chan struct{}
}

// ordered consumes the stream with n instances of seqjetstream, each
// given every partition's pinned consumer. With more than one instance
// they share the partitions out with WithBalance: n-1 start, the n-th
// joins once they have shared every partition out (a scale-out), and the
// layout is recorded before and after it and, with kill, after the one
// owning the most partitions is killed halfway through the messages left:
// its connection is cut and it applies nothing more, as if its process
// died.
func (e *env) ordered(ctx context.Context, name string, n int, kill bool, st *store, publish func() error) (result, error) {
	p := e.p
	balance := n > 1
	bucket := name + "-members"
	if balance {
		// On the same server; the TTL (how long a dead instance stays a
		// member) at most the PinnedTTL.
		if _, err := e.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: bucket, TTL: 3 * time.Second, Storage: jetstream.FileStorage, // survives a server restart
		}); err != nil {
			return result{}, err
		}
	}
	for part := range p.partitions {
		_, err := e.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:        fmt.Sprintf("%s-%d", name, part),
			FilterSubject:  fmt.Sprintf("part.%d.*", part),
			AckPolicy:      jetstream.AckExplicitPolicy,
			AckWait:        2 * time.Second,
			MaxAckPending:  1000,
			PriorityPolicy: jetstream.PriorityPolicyPinned,
			PriorityGroups: []string{"owners"},
			PinnedTTL:      4 * time.Second, // how long a silent instance keeps its partitions
		})
		if err != nil {
			return result{}, err
		}
	}
	var res result
	var mu sync.Mutex
	var live []*instance
	defer func() {
		for _, in := range live {
			in.stop(time.Second)
		}
	}()
	// Errors only: the killed instance's failing pulls are expected.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	launch := func(id int) error {
		nc, err := nats.Connect(e.url, nats.Name(fmt.Sprintf("%s-%d", name, id)))
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return err
		}
		var cons []jetstream.Consumer
		for part := range p.partitions {
			cn, err := js.Consumer(ctx, "EVENTS", fmt.Sprintf("%s-%d", name, part))
			if err != nil {
				nc.Close()
				return err
			}
			cons = append(cons, cn)
		}
		opts := []seqjetstream.Option{seqjetstream.WithMaxConcurrency(p.concurrency), seqjetstream.WithMaxBuffered(1000),
			seqjetstream.WithHandover(js), seqjetstream.WithLogger(logger)}
		if balance {
			opts = append(opts, seqjetstream.WithBalance(js, bucket))
		}
		c, err := seqjetstream.NewConsumer(cons, func(ctx context.Context, m jetstream.Msg) error {
			// The message's stream sequence and its owner's epoch, from
			// the ctx: no metadata to parse.
			seq := seqjetstream.Sequence(ctx)
			if err := work(ctx, seq, p.latency); err != nil {
				return err
			}
			return st.applyOwned(id, partOf(m.Subject()), keyOf(m.Subject()), seq, seqjetstream.Epoch(ctx))
		}, opts...)
		if err != nil {
			nc.Close()
			return err
		}
		in := &instance{id: id, name: fmt.Sprint("instance-", id), nc: nc, c: c, done: make(chan struct{})}
		go func() {
			defer close(in.done)
			_ = c.Run(context.Background())
		}()
		mu.Lock()
		live = append(live, in)
		mu.Unlock()
		return nil
	}
	// layout waits, up to 5s, for the live instances to be assigned every
	// partition, none more than one above another, and records whose
	// each is.
	layout := func(when string) {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		mu.Lock()
		now := slices.Clone(live)
		mu.Unlock()
		settled := waitFor(wctx, func() bool { return balancedAssignment(now, p.partitions) }) == nil
		line := fmt.Sprintf("  partitions %-18s %s", when+":", describeAssignment(now))
		if !settled {
			line += " (not settled)"
		}
		res.layouts = append(res.layouts, line)
	}
	first := n
	if balance {
		first = n - 1
	}
	for id := 1; id <= first; id++ {
		if err := launch(id); err != nil {
			return res, err
		}
	}
	if balance {
		layout("before scale-out")
	}
	start := time.Now() // the work starts when the messages do (or at once: they are there)
	if publish != nil {
		if err := publish(); err != nil {
			return res, err
		}
	}
	if balance {
		if err := waitFor(ctx, func() bool { return st.count() >= p.messages/4 }); err != nil {
			return res, err
		}
		if err := launch(n); err != nil {
			return res, err
		}
		layout("after scale-out")
	}
	if kill {
		// Halfway through what is left, so that the survivors have work
		// to take over.
		target := st.count() + (p.messages-st.count())/2
		if err := waitFor(ctx, func() bool { return st.count() >= target }); err != nil {
			return res, err
		}
		victim, owned := busiest(live)
		res.killed, res.killedAt, res.killedOwned = victim.name, st.count(), owned
		st.kill(victim.id)
		victim.nc.Close()
		victim.stop(time.Second)
		mu.Lock()
		for i, in := range live {
			if in == victim {
				live = append(live[:i], live[i+1:]...)
				break
			}
		}
		mu.Unlock()
		if balance {
			layout("after the kill")
		}
	}
	if err := waitFor(ctx, func() bool { return st.count() >= p.messages }); err != nil {
		return res, err
	}
	res.elapsed = time.Since(start)
	return res, nil
}

// balancedAssignment reports whether each of the parts partitions is
// assigned to exactly one of the instances, and none has more than one
// above another.
func balancedAssignment(live []*instance, parts int) bool {
	whose := make([]int, parts)
	lo, hi := parts, 0
	for _, in := range live {
		n := 0
		for i, cs := range in.c.Stats().Consumers {
			if cs.Assigned {
				whose[i]++
				n++
			}
		}
		lo, hi = min(lo, n), max(hi, n)
	}
	for _, w := range whose {
		if w != 1 {
			return false
		}
	}
	return hi-lo <= 1
}

// describeAssignment lists each instance's partitions: "instance-1 [0 3], ...".
func describeAssignment(live []*instance) string {
	var parts []string
	for _, in := range live {
		var mine []int
		for i, cs := range in.c.Stats().Consumers {
			if cs.Assigned {
				mine = append(mine, i)
			}
		}
		parts = append(parts, fmt.Sprintf("%s %v", in.name, mine))
	}
	return strings.Join(parts, ", ")
}

// busiest returns the instance owning the most partitions, and how many.
func busiest(live []*instance) (*instance, int) {
	var best *instance
	most := -1
	for _, in := range live {
		owned := 0
		for _, cs := range in.c.Stats().Consumers {
			if cs.Owned {
				owned++
			}
		}
		if owned > most {
			best, most = in, owned
		}
	}
	return best, most
}

func (in *instance) stop(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = in.c.Close(ctx)
	in.nc.Close()
	<-in.done
}

// perPartition is the first answer NATS users have today: one consumer per
// partition with MaxAckPending=1, so each partition runs one message at a
// time, in order.
func (e *env) perPartition(ctx context.Context, st *store) (time.Duration, error) {
	p := e.p
	nc, js, err := connect(e.url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	var cons []jetstream.Consumer
	for part := range p.partitions {
		cn, err := e.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: fmt.Sprint("map1-", part), FilterSubject: fmt.Sprintf("part.%d.*", part),
			AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1,
		})
		if err != nil {
			return 0, err
		}
		if cn, err = js.Consumer(ctx, "EVENTS", cn.CachedInfo().Name); err != nil {
			return 0, err
		}
		cons = append(cons, cn)
	}
	return e.loops(ctx, st, cons, func(ctx context.Context, m jetstream.Msg) {
		e.handle(ctx, st, m)
	})
}

// pool is the second answer: one consumer, a pool of workers; fast, but a
// key's messages run at once on several workers and finish out of order.
func (e *env) pool(ctx context.Context, st *store) (time.Duration, error) {
	p := e.p
	nc, js, err := connect(e.url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	if _, err := e.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "pool", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1000,
	}); err != nil {
		return 0, err
	}
	cn, err := js.Consumer(ctx, "EVENTS", "pool")
	if err != nil {
		return 0, err
	}
	work := make(chan jetstream.Msg, p.concurrency)
	var wg sync.WaitGroup
	for range p.concurrency {
		wg.Go(func() {
			for m := range work {
				e.handle(ctx, st, m)
			}
		})
	}
	d, err := e.loops(ctx, st, []jetstream.Consumer{cn}, func(ctx context.Context, m jetstream.Msg) {
		select {
		case work <- m:
		case <-ctx.Done():
		}
	})
	close(work)
	wg.Wait()
	return d, err
}

// handle does a baseline's work for m and acks it.
func (e *env) handle(ctx context.Context, st *store, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	if work(ctx, meta.Sequence.Stream, e.p.latency) != nil {
		return
	}
	st.apply(keyOf(m.Subject()), meta.Sequence.Stream)
	_ = m.Ack()
}

// loops runs a plain Fetch loop per consumer, handing each message to h,
// until every message is applied; it returns how long that took.
func (e *env) loops(ctx context.Context, st *store, cons []jetstream.Consumer, h func(context.Context, jetstream.Msg)) (time.Duration, error) {
	start := time.Now()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var done atomic.Bool
	var wg sync.WaitGroup
	for _, cn := range cons {
		wg.Go(func() {
			for ctx.Err() == nil && !done.Load() {
				fctx, cancel := context.WithTimeout(ctx, time.Second)
				b, err := cn.Fetch(1000, jetstream.FetchContext(fctx))
				if err == nil {
					for m := range b.Messages() {
						h(ctx, m)
					}
				}
				cancel()
			}
		})
	}
	err := waitFor(ctx, func() bool { return st.count() >= e.p.messages })
	d := time.Since(start)
	done.Store(true)
	stop()
	wg.Wait()
	return d, err
}

func connect(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// waitFor waits for cond, checking every millisecond, until ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
