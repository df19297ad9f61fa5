package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seqsched/seqsched/seqkafka"
)

type params struct {
	brokers     string
	records     int
	keys        int
	partitions  int
	latency     time.Duration
	concurrency int
	poison      int
	highPct     int
	session     time.Duration
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var p params
	fs := flag.NewFlagSet("kafka", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&p.brokers, "brokers", "", "host:port of a real cluster (default: start a 3-broker kfake cluster)")
	fs.IntVar(&p.records, "records", 20000, "records to produce")
	fs.IntVar(&p.keys, "keys", 2000, "distinct keys (zipf-skewed popularity)")
	fs.IntVar(&p.partitions, "partitions", 6, "partitions of the topic")
	fs.DurationVar(&p.latency, "latency", 2*time.Millisecond, "handler latency, uniform in [0, latency]")
	fs.IntVar(&p.concurrency, "concurrency", 64, "handlers at once per member")
	fs.IntVar(&p.poison, "poison", 5, "records that fail every attempt and go to the dead-letter topic")
	fs.IntVar(&p.highPct, "high", 5, "percent of records marked High")
	fs.DurationVar(&p.session, "session", 0, "group session timeout (default 1s on kfake, 10s on a real cluster)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kafka: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if p.records < 10 || p.keys < 1 || p.partitions < 1 || p.concurrency < 1 || p.latency < 0 ||
		p.poison < 0 || p.poison > p.records/10 || p.highPct < 0 || p.highPct > 100 {
		fmt.Fprintln(stderr, "kafka: need -records >= 10, -keys, -partitions, -concurrency >= 1, -latency >= 0, 0 <= -poison <= records/10, 0 <= -high <= 100")
		return 2
	}
	if err := runExample(ctx, p, stdout); err != nil {
		fmt.Fprintln(stderr, "kafka:", err)
		return 1
	}
	return 0
}

func runExample(ctx context.Context, p params, out io.Writer) error {
	var seeds []string
	where := "a real cluster at " + p.brokers
	if p.brokers == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(3),
			kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err != nil {
			return err
		}
		defer c.Close()
		seeds = c.ListenAddrs()
		where = "a 3-broker kfake cluster on 127.0.0.1"
		if p.session == 0 {
			p.session = time.Second
		}
	} else {
		seeds = strings.Split(p.brokers, ",")
		if p.session == 0 {
			p.session = 10 * time.Second
		}
	}
	suffix := fmt.Sprint(time.Now().UnixNano())
	topic, dlqTopic := "orders-"+suffix, "orders-dlq-"+suffix

	// kgo's default partitioner sends a key to the partition Kafka's own
	// producers would (murmur2 of the key).
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := createTopics(ctx, admin, int32(p.partitions), topic, dlqTopic); err != nil {
		return err
	}
	high, err := produce(ctx, admin, p, topic)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "kafka: %d records, %d keys (zipf), %d partitions on %s\n", p.records, p.keys, p.partitions, where)

	st := newStore(p.records)
	elapsed, killedLines, err := consumeOrdered(ctx, p, seeds, topic, dlqTopic, admin, st)
	if err != nil {
		return err
	}
	count, redeliver, dead, violations := st.snapshot()
	lost := p.records - count
	// The speed-up compares like with like: one member each, on the same
	// records, with no kill and no rebalance in either time.
	single, err := consumeSingle(ctx, p, seeds, topic)
	if err != nil {
		return err
	}
	base, err := consumeBaseline(ctx, p, seeds, topic)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "members:            3, then member 2 killed ungracefully halfway and 1 added\n")
	fmt.Fprintf(out, "records:            %d (%d High)\n", p.records, high)
	fmt.Fprintf(out, "keys:               %d\n", p.keys)
	fmt.Fprintf(out, "throughput:         %.0f records/s (%v, the kill and its rebalances included)\n", float64(p.records)/elapsed.Seconds(), elapsed.Round(time.Millisecond))
	fmt.Fprintf(out, "order violations:   %d (max per key, Normal records)\n", violations)
	fmt.Fprintf(out, "lost:               %d\n", lost)
	fmt.Fprintf(out, "duplicates applied: 0 (%d redeliveries ignored by the idempotent store)\n", redeliver)
	fmt.Fprintf(out, "dead-lettered:      %d\n", dead)
	fmt.Fprintf(out, "killed member:      %d lines logged after the kill (it cannot reach the brokers)\n", killedLines)
	fmt.Fprintf(out, "one member each, same records, no kill:\n")
	fmt.Fprintf(out, "  seqkafka:                %v (%.0f records/s)\n", single.Round(time.Millisecond), float64(p.records)/single.Seconds())
	fmt.Fprintf(out, "  goroutine per partition: %v; speed-up %.1fx\n", base.Round(time.Millisecond), base.Seconds()/single.Seconds())
	if violations > 0 || lost > 0 || dead != p.poison {
		return fmt.Errorf("%d order violations, %d lost, %d dead-lettered of %d poison", violations, lost, dead, p.poison)
	}
	return nil
}

func createTopics(ctx context.Context, cl *kgo.Client, partitions int32, topics ...string) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	for _, t := range topics {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t, partitions, -1
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		if t.ErrorCode != 0 {
			return fmt.Errorf("create topic %s: error code %d", t.Topic, t.ErrorCode)
		}
	}
	return nil
}

// produce writes the records: keys by zipf popularity, highPct of them
// High, and p.poison spread-out records that always fail.
func produce(ctx context.Context, cl *kgo.Client, p params, topic string) (high int, err error) {
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 10, uint64(p.keys-1)) // top key ~2.4%, top 10 ~17% at 2000 keys
	rs := make([]*kgo.Record, p.records)
	for i := range rs {
		key := fmt.Sprint("customer-", zipf.Uint64())
		r := &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(fmt.Sprint("order ", i))}
		if p.poison > 0 && i%(p.records/p.poison) == p.records/p.poison/2 {
			r.Value = []byte("poison")
		} else if rng.IntN(100) < p.highPct {
			r.Headers = []kgo.RecordHeader{{Key: seqkafka.DefaultPriorityHeader, Value: []byte("high")}}
			high++
		}
		rs[i] = r
	}
	return high, cl.ProduceSync(ctx, rs...).FirstErr()
}

func isHigh(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == seqkafka.DefaultPriorityHeader {
			return true
		}
	}
	return false
}

var errPoison = errors.New("poison record")

// fetchMaxWait bounds how long a fetch waits on a broker whose partitions
// have no new records. A partition whose buffer filled is paused and later
// resumed (see seqkafka.WithMaxBuffered), and a fetch already waiting on
// its broker for the broker's other, drained partitions is not cut short
// by the resume: with kgo's default 5s wait, the tail of a run could stall
// for seconds. Records are all produced before the consumers start, so a
// short wait costs nothing.
const fetchMaxWait = 100 * time.Millisecond

// work simulates the handler's work: uniform in [0, max].
func work(ctx context.Context, rng *lockedRand, max time.Duration) error {
	if max <= 0 {
		return nil
	}
	t := time.NewTimer(rng.duration(max))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type lockedRand struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func (l *lockedRand) duration(max time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(l.rng.Int64N(int64(max) + 1))
}

// member is one group member of the ordered run.
type member struct {
	c      *seqkafka.Consumer
	dialer *killableDialer
	frozen chan struct{} // closed when the member is killed
	after  atomic.Int64  // lines its consumer logged after the kill
	done   chan error
}

// consumeOrdered runs the group with the kill. It returns the time until
// every record was applied, and how many lines the killed member's
// consumer logged after the kill (see killedHandler).
func consumeOrdered(ctx context.Context, p params, seeds []string, topic, dlqTopic string, producer *kgo.Client, st *store) (_ time.Duration, killedLines int64, err error) {
	dlq, err := seqkafka.DeadLetterTopic(producer, dlqTopic)
	if err != nil {
		return 0, 0, err
	}
	rng := &lockedRand{rng: rand.New(rand.NewPCG(3, 4))}
	start := time.Now()
	newMember := func() (*member, error) {
		m := &member{dialer: &killableDialer{}, frozen: make(chan struct{}), done: make(chan error, 1)}
		// A killed member's consumer goes on failing to reach the brokers
		// until its Close returns (a crashed process would be silent):
		// its lines after the kill are counted and reported below, the
		// others go to slog.Default as usual.
		logger := slog.New(&killedHandler{m: m, next: slog.Default().Handler()})
		h := func(ctx context.Context, r *kgo.Record) error {
			select {
			case <-m.frozen: // a killed process does nothing more
				<-ctx.Done()
				return ctx.Err()
			default:
			}
			if err := work(ctx, rng, p.latency); err != nil {
				return err
			}
			if string(r.Value) == "poison" {
				return errPoison
			}
			st.apply(r, isHigh(r), false)
			return nil
		}
		c, err := seqkafka.NewConsumer([]kgo.Opt{
			kgo.SeedBrokers(seeds...),
			kgo.ConsumerGroup("orders-" + topic),
			kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.SessionTimeout(p.session),
			// A killed member never rejoins: a rebalance waits this long
			// for it before going on without it.
			kgo.RebalanceTimeout(3 * p.session),
			kgo.HeartbeatInterval(p.session / 10),
			kgo.FetchMaxWait(fetchMaxWait),
			kgo.Dialer(m.dialer.dial),
		}, h,
			seqkafka.WithMaxConcurrency(p.concurrency),
			// The producer here is this program: trusted to mark records High.
			seqkafka.WithPriorityHeader(seqkafka.DefaultPriorityHeader),
			seqkafka.WithRetries(3, func(context.Context, *kgo.Record, int, error) time.Duration { return time.Millisecond }),
			seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
				if err := dlq(ctx, r, attempts, err); err != nil {
					return err
				}
				st.apply(r, isHigh(r), true)
				return nil
			}),
			seqkafka.WithCommitInterval(100*time.Millisecond),
			seqkafka.WithCommitTimeout(time.Second),
			seqkafka.WithDrainTimeout(2*p.session), // below the rebalance timeout
			seqkafka.WithLogger(logger),
		)
		if err != nil {
			return nil, err
		}
		m.c = c
		go func() { m.done <- c.Run(context.Background()) }()
		return m, nil
	}
	closeMember := func(m *member, d time.Duration) error {
		cctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		err := m.c.Close(cctx)
		if rerr := <-m.done; rerr != nil && err == nil {
			err = rerr
		}
		return err
	}

	var members []*member
	defer func() {
		// Together: closed one after another, each member's leave would
		// start a rebalance that the next one's Close must wait through.
		var wg sync.WaitGroup
		errs := make([]error, len(members))
		for i, m := range members {
			wg.Go(func() { errs[i] = closeMember(m, 10*time.Second) })
		}
		wg.Wait()
		if cerr := errors.Join(errs...); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	for range 3 {
		m, err := newMember()
		if err != nil {
			return 0, 0, err
		}
		members = append(members, m)
	}
	select {
	case <-st.half:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	victim := members[1]
	members = append(members[:1], members[2:]...)
	close(victim.frozen)
	victim.dialer.kill()
	// A crashed process would call nothing more; this one must still be
	// closed to free its goroutines, and its Close fails: it cannot reach
	// the brokers to commit or to leave the group (errMemberKilled), or
	// its frozen handlers outlast the 200ms (context.DeadlineExceeded).
	// Those failures are the kill's, expected; any other is reported.
	var wg sync.WaitGroup
	var victimErr error
	wg.Go(func() {
		if cerr := closeMember(victim, 200*time.Millisecond); cerr != nil &&
			!errors.Is(cerr, errMemberKilled) && !errors.Is(cerr, context.DeadlineExceeded) {
			victimErr = fmt.Errorf("close of the killed member: %w", cerr)
		}
	})
	defer func() {
		wg.Wait()
		killedLines = victim.after.Load()
		if victimErr != nil && err == nil {
			err = victimErr
		}
	}()
	m, err := newMember()
	if err != nil {
		return 0, 0, err
	}
	members = append(members, m)
	select {
	case <-st.done:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	return time.Since(start), 0, nil
}

// consumeSingle reads the same topic with one seqkafka member, with the
// same handler latency and no store; poison records are skipped without
// retries, as in consumeBaseline.
func consumeSingle(ctx context.Context, p params, seeds []string, topic string) (time.Duration, error) {
	rng := &lockedRand{rng: rand.New(rand.NewPCG(3, 4))}
	var handled atomic.Int64
	all := make(chan struct{})
	start := time.Now()
	c, err := seqkafka.NewConsumer([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup("single-" + topic),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(fetchMaxWait),
	}, func(ctx context.Context, r *kgo.Record) error {
		if err := work(ctx, rng, p.latency); err != nil {
			return err
		}
		if handled.Add(1) == int64(p.records) {
			close(all)
		}
		return nil
	}, seqkafka.WithMaxConcurrency(p.concurrency))
	if err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var elapsed time.Duration
	select {
	case <-all:
		elapsed = time.Since(start)
	case <-ctx.Done():
	}
	cerr := c.Close(context.Background())
	if rerr := <-done; cerr == nil {
		cerr = rerr
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return elapsed, cerr
}

// consumeBaseline reads the same topic with one goroutine per partition
// handling its records one after another, the usual franz-go consumer,
// with the same handler latency; poison records are skipped without
// retries.
func consumeBaseline(ctx context.Context, p params, seeds []string, topic string) (time.Duration, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("baseline-"+topic),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(fetchMaxWait))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	rng := &lockedRand{rng: rand.New(rand.NewPCG(3, 4))}
	start := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	workers := map[int32]chan []*kgo.Record{}
	defer func() {
		for _, ch := range workers {
			close(ch)
		}
	}()
	seen := 0
	for seen < p.records {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		var batchWG sync.WaitGroup
		fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if len(ftp.Records) == 0 {
				return
			}
			ch := workers[ftp.Partition]
			if ch == nil {
				ch = make(chan []*kgo.Record)
				workers[ftp.Partition] = ch
				wg.Go(func() {
					for rs := range ch {
						for range rs {
							_ = work(ctx, rng, p.latency)
						}
						batchWG.Done()
					}
				})
			}
			seen += len(ftp.Records)
			batchWG.Add(1)
			ch <- ftp.Records
		})
		batchWG.Wait() // each poll's batch done before the next, as a committing consumer would
	}
	return time.Since(start), nil
}

var errMemberKilled = errors.New("member killed")

// killedHandler passes a member's log lines on to next until the member is
// killed, and counts them after.
type killedHandler struct {
	m    *member
	next slog.Handler
}

func (h *killedHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *killedHandler) Handle(ctx context.Context, r slog.Record) error {
	select {
	case <-h.m.frozen:
		h.m.after.Add(1)
		return nil
	default:
		return h.next.Handle(ctx, r)
	}
}

func (h *killedHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &killedHandler{m: h.m, next: h.next.WithAttrs(as)}
}

func (h *killedHandler) WithGroup(name string) slog.Handler {
	return &killedHandler{m: h.m, next: h.next.WithGroup(name)}
}

// killableDialer cuts a member off the network at once, as if its process
// died: open connections are closed and new dials fail.
type killableDialer struct {
	mu    sync.Mutex
	dead  bool
	conns []net.Conn
	d     net.Dialer
}

func (k *killableDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return nil, errMemberKilled
	}
	c, err := k.d.DialContext(ctx, network, host)
	if err == nil {
		k.conns = append(k.conns, c)
	}
	return c, err
}

func (k *killableDialer) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = true
	for _, c := range k.conns {
		c.Close()
	}
}
