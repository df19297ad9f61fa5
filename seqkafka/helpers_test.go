package seqkafka_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seqsched/seqsched/seqkafka"
)

// cluster starts an in-process Kafka cluster with topic "t" of n
// partitions and short group timeouts, closed at the end of the test.
func cluster(t testing.TB, partitions int32, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, "t"),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// produce writes rs to the cluster, synchronously.
func produce(t testing.TB, c *kfake.Cluster, rs []*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// groupOpts are the client options of a test member.
func groupOpts(c *kfake.Cluster, extra ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumerGroup("g"),
		kgo.ConsumeTopics("t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A session a starved machine does not miss (a race-built test
		// process on a loaded 2-core machine can stall past a second):
		// evicted, a member loses its partitions and handles their
		// records again, which a test counting calls or waiting on a held
		// record does not expect. Tests that evict do it on purpose
		// (fence), and the property test, whose killed members must be
		// evicted, sets its own.
		kgo.SessionTimeout(time.Minute),
		// A killed member never rejoins: rebalances wait this long for it.
		kgo.RebalanceTimeout(3 * time.Second),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.FetchMaxWait(50 * time.Millisecond),
		// kfake may leave a JoinGroup unanswered when a generation
		// completes while a killed member was revoking (seen on main too:
		// the member then sits in the join until kgo's read deadline,
		// rebalance timeout + this overhead, 13 s by default, and its
		// Close waits for it). A short overhead makes it rejoin sooner.
		kgo.RequestTimeoutOverhead(2 * time.Second),
	}, extra...)
}

// member runs a consumer's Run until the test closes it.
type member struct {
	c    *seqkafka.Consumer
	done chan struct{}
	err  error // Run's result, once done is closed
}

// startMember starts c's Run on a goroutine and returns once it has
// begun, so that every Close of the member stops a Run in progress, which
// then returns nil. (A Close before Run began would make Run return
// ErrClosed: a goroutine just started may not have run yet.)
func startMember(t testing.TB, c *seqkafka.Consumer) *member {
	t.Helper()
	m := &member{c: c, done: make(chan struct{})}
	begun := make(chan struct{})
	seqkafka.OnRunBegun(c, sync.OnceFunc(func() { close(begun) }))
	go func() {
		m.err = c.Run(context.Background())
		close(m.done)
	}()
	t.Cleanup(func() { m.close(t, 10*time.Second) })
	select {
	case <-begun:
	case <-m.done:
		t.Fatalf("Run = %v before it began; want it running", m.err)
	}
	return m
}

// close closes the member within d and waits for its Run to return nil.
func (m *member) close(t testing.TB, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := m.c.Close(ctx)
	<-m.done
	if m.err != nil {
		t.Errorf("Run = %v; want nil after Close", m.err)
	}
	return err
}

// commits records every offset commit the cluster receives for topic "t".
type commits struct {
	mu   sync.Mutex
	seen []commitSeen
	// check, when set, runs on each commit before the cluster applies it.
	check func(part int32, offset int64, meta string)
}

type commitSeen struct {
	part   int32
	offset int64
	meta   string
}

func watchCommits(c *kfake.Cluster) *commits {
	w := &commits{}
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.OffsetCommitRequest)
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				meta := ""
				if p.Metadata != nil {
					meta = *p.Metadata
				}
				w.seen = append(w.seen, commitSeen{p.Partition, p.Offset, meta})
				if w.check != nil {
					w.check(p.Partition, p.Offset, meta)
				}
			}
		}
		return nil, nil, false
	})
	return w
}

func (w *commits) all() []commitSeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]commitSeen(nil), w.seen...)
}

// killableDialer lets a test cut a member off the network at once, as if
// its process died: open connections are closed and new dials fail.
type killableDialer struct {
	mu     sync.Mutex
	dead   bool
	conns  []net.Conn
	dialer net.Dialer
}

var errKilled = errors.New("member killed")

func (d *killableDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return nil, errKilled
	}
	conn, err := d.dialer.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	d.conns = append(d.conns, conn)
	return conn, nil
}

func (d *killableDialer) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	for _, c := range d.conns {
		c.Close()
	}
}

func rec(part int32, key string, value string) *kgo.Record {
	r := &kgo.Record{Topic: "t", Partition: part, Value: []byte(value)}
	if key != "" {
		r.Key = []byte(key)
	}
	return r
}

func keyed(n int, parts int32, keys int) []*kgo.Record {
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = rec(int32(i)%parts, fmt.Sprintf("k%d", i%keys), fmt.Sprint(i))
	}
	return rs
}

// fixedBackoff is a BackoffFunc that waits d before every retry.
func fixedBackoff(d time.Duration) seqkafka.BackoffFunc {
	return func(context.Context, *kgo.Record, int, error) time.Duration { return d }
}

// fence makes the coordinator answer cons's next heartbeat with
// UNKNOWN_MEMBER_ID, as when it evicted the member: kgo reports its
// partitions lost, and the member rejoins. The channel is closed once the
// heartbeat was answered so.
func fence(c *kfake.Cluster, cons *seqkafka.Consumer) <-chan struct{} {
	done := make(chan struct{})
	c.ControlKey(int16(kmsg.Heartbeat), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.HeartbeatRequest)
		if member, _ := cons.Client().GroupMetadata(); member == "" || req.MemberID != member {
			return nil, nil, false // someone else's: kept for the next
		}
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.Version = req.Version
		resp.ErrorCode = kerr.UnknownMemberID.Code
		close(done)
		return resp, nil, true
	})
	return done
}
