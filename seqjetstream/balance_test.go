package seqjetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqjetstream"
)

// The guarantee of this file: with WithBalance, the partitions are shared
// out evenly among the instances (no instance owns more than one above
// another once membership settles), move when one joins or leaves (a
// join at most ⌈P/n⌉ of them, a leave only the leaver's), and are never
// orphaned: a lost bucket, a server restart or a member started before
// its bucket exists leaves every partition pulled for, and a dead
// member's partitions move to the survivors. Each key's order holds and
// nothing is lost throughout. Each scenario logs its spread, the time
// to rebalance, the partitions moved, and what was lost, applied twice,
// applied out of order and redelivered (-v shows them). They take about
// 25 s together; soak them with
//
//	go test -race -count=20 -v -run 'TestBalance[A-Z]|TestAssign' .
//
// (the property tests with WithBalance are in property_test.go; members
// as real processes, killed with SIGKILL and frozen with SIGSTOP, in
// balance_process_test.go).

// balanced is a stream of parts partitions, each a pinned consumer
// part-<i> of subjects p.<i>.* (AckWait 500ms, PinnedTTL 4s), and, unless
// noBucket, a membership bucket "owners" with a TTL of 3s: a member whose
// heartbeats stall for 2s under load would look dead, and its partitions
// would move for that.
type balanced struct {
	t       *testing.T
	url     string
	js      jetstream.JetStream
	parts   int
	store   *orderStore
	seq     atomic.Uint64 // messages published
	members []*member     // every member started, dead or alive
	gate    chan struct{} // messages of key "gate" wait for it to close
	logger  *slog.Logger  // the next member's; the journal's if nil
	journal *journal      // the members' log records, logged if the test fails
	kvDown  atomic.Bool   // the members' JetStream refuses to bind or make the bucket
}

// kvGate is a member's JetStream for WithBalance: while down is set, it
// refuses to bind the membership bucket or make it again, as a server
// that lost the bucket would to a member without the right to make it.
type kvGate struct {
	jetstream.JetStream
	down *atomic.Bool
}

var errKVDown = errors.New("membership bucket refused (test)")

func (g kvGate) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	if g.down.Load() {
		return nil, errKVDown
	}
	return g.JetStream.KeyValue(ctx, bucket)
}

func (g kvGate) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if g.down.Load() {
		return nil, errKVDown
	}
	return g.JetStream.CreateKeyValue(ctx, cfg)
}

type balancedOpts struct {
	url      string                // "" for a server of its own
	storage  jetstream.StorageType // of the stream and the bucket
	noBucket bool
}

func newBalanced(t *testing.T, parts int) *balanced {
	return newBalancedWith(t, parts, balancedOpts{storage: jetstream.MemoryStorage})
}

func newBalancedWith(t *testing.T, parts int, o balancedOpts) *balanced {
	if o.url == "" {
		o.url = startServer(t)
	}
	_, js := reconnecting(t, o.url)
	s, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "S", Subjects: []string{"p.*.*"}, Storage: o.storage})
	require.NoError(t, err)
	for i := range parts {
		newConsumer(t, s, jetstream.ConsumerConfig{
			Durable: fmt.Sprint("part-", i), FilterSubject: fmt.Sprintf("p.%d.*", i),
			AckWait: 500 * time.Millisecond, MaxAckPending: 100,
			PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 4 * time.Second,
		})
	}
	if !o.noBucket {
		_, err := js.CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{
			Bucket: "owners", TTL: 3 * time.Second, Storage: o.storage,
		})
		require.NoError(t, err)
	}
	return &balanced{t: t, url: o.url, js: js, parts: parts, store: newOrderStore(), gate: make(chan struct{}), journal: newJournal(t)}
}

// reconnecting is connect for a server that may restart: it reconnects
// every 50ms, for ever.
func reconnecting(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// member is one instance: its own connection, every partition's consumer.
type member struct {
	name string
	nc   *nats.Conn
	c    *seqjetstream.Consumer
	run  *running
	dead atomic.Bool // killed: applies nothing more, as a dead process
}

func (b *balanced) join() *member {
	t := b.t
	nc, js := reconnecting(t, b.url)
	var cons []jetstream.Consumer
	for i := range b.parts {
		cn, err := js.Consumer(context.Background(), "S", fmt.Sprint("part-", i))
		require.NoError(t, err)
		cons = append(cons, cn)
	}
	m := &member{name: fmt.Sprint("m", len(b.members)+1), nc: nc}
	logger := b.journal.logger(m.name)
	if b.logger != nil {
		logger, b.logger = b.logger, nil
	}
	c, err := seqjetstream.NewConsumer(cons, func(ctx context.Context, msg jetstream.Msg) error {
		if m.dead.Load() {
			return fmt.Errorf("dead")
		}
		if strings.HasSuffix(msg.Subject(), ".gate") {
			<-b.gate
		}
		b.store.apply(msg.Subject(), seqjetstream.Sequence(ctx))
		return nil
	}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300*time.Millisecond),
		seqjetstream.WithBalance(kvGate{js, &b.kvDown}, "owners"), seqjetstream.WithLogger(logger))
	require.NoError(t, err)
	m.c = c
	m.run = start(t, c)
	b.members = append(b.members, m)
	return m
}

// kill ends m as SIGKILL would: it applies and answers nothing more, and
// its connection is gone, so its pins and its key lapse.
func (m *member) kill() {
	m.dead.Store(true)
	m.nc.Close()
}

// round publishes one message to each partition, under key k.
func (b *balanced) round(key string) {
	for i := range b.parts {
		for {
			_, err := b.js.Publish(context.Background(), fmt.Sprintf("p.%d.%s", i, key), []byte("x"))
			if err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond) // the server restarts: publish again once it is back
		}
		b.seq.Add(1)
	}
}

func owned(c *seqjetstream.Consumer) int {
	n := 0
	for _, cs := range c.Stats().Consumers {
		if cs.Owned {
			n++
		}
	}
	return n
}

// assignment returns, per partition, the live member it is assigned to
// ("" if none, "*" if more than one).
func assignment(live ...*member) []string {
	return perPartition(func(cs seqjetstream.ConsumerStats) bool { return cs.Assigned }, live...)
}

// owners returns, per partition, the live member that owns it ("" if
// none, "*" if more than one).
func owners(live ...*member) []string {
	return perPartition(func(cs seqjetstream.ConsumerStats) bool { return cs.Owned }, live...)
}

// perPartition returns, per partition, the live member whose consumer
// stats satisfy is ("" if none, "*" if more than one).
func perPartition(is func(seqjetstream.ConsumerStats) bool, live ...*member) []string {
	var out []string
	for _, m := range live {
		for i, cs := range m.c.Stats().Consumers {
			if i >= len(out) {
				out = append(out, "")
			}
			if is(cs) {
				if out[i] != "" {
					out[i] = "*"
				} else {
					out[i] = m.name
				}
			}
		}
	}
	return out
}

func movedBetween(a, b []string) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// settle publishes rounds (a partition is pinned at a delivery) until the
// live members own want partitions each, in order, each partition
// assigned to one of them and owned by its assignee, then waits for every
// message published to be applied; it returns how long that took. (Owned
// counts alone can match while two members are still to swap partitions
// their views gave them before they agreed.)
func (b *balanced) settle(want []int, live ...*member) time.Duration {
	b.t.Helper()
	return b.settleWhen(func() (bool, string) {
		got := make([]int, len(live))
		for i, m := range live {
			got[i] = owned(m.c)
		}
		a, o := assignment(live...), owners(live...)
		return fmt.Sprint(got) == fmt.Sprint(want) && !contains(a, "*") && !contains(a, "") && slices.Equal(a, o),
			fmt.Sprintf("partitions owned %v; want %v; assigned %v; owned by %v", got, want, a, o)
	})
}

// settleOwned is settle for a membership that does not assign: until
// every partition is owned by exactly one of the live members.
func (b *balanced) settleOwned(live ...*member) time.Duration {
	b.t.Helper()
	return b.settleWhen(func() (bool, string) {
		o := owners(live...)
		return !contains(o, "*") && !contains(o, ""), fmt.Sprintf("partitions owned by %v; want one live member each", o)
	})
}

// settleWhen publishes rounds until settled says so, then waits for every
// message published to be applied; it returns how long that took.
func (b *balanced) settleWhen(settled func() (bool, string)) time.Duration {
	t := b.t
	t.Helper()
	begin := time.Now()
	deadline := begin.Add(30 * time.Second)
	for r := 0; ; r++ {
		b.round(fmt.Sprint("k", r%3))
		ok, state := settled()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s; applied %d of %d", state, b.store.count(), b.seq.Load())
		}
		time.Sleep(100 * time.Millisecond) // a publishing rhythm, not a synchronisation
	}
	for b.store.count() != int(b.seq.Load()) {
		if time.Now().After(deadline) {
			_, state := settled()
			t.Fatalf("applied %d of %d; %s", b.store.count(), b.seq.Load(), state)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(begin)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// report logs what the scenario cost, and checks that nothing was lost
// or applied out of order.
func (b *balanced) report(what string, took time.Duration, movedN int, live ...*member) {
	t := b.t
	t.Helper()
	var counts []int
	for _, m := range live {
		counts = append(counts, owned(m.c))
	}
	var received uint64
	for _, m := range b.members {
		received += m.c.Stats().Received
	}
	published := int(b.seq.Load())
	s := b.store.snapshot()
	t.Logf("%s: spread %v, rebalanced in %v, %d partitions moved; published %d, lost %d, applied twice %d, order gaps %d, redeliveries %d",
		what, counts, took.Round(time.Millisecond), movedN, published, published-s.applied, s.dups, s.gaps, int(received)-published)
	assert.Equal(t, published, s.applied, "%s: every message applied", what)
	assert.Zero(t, s.gaps, "%s: messages applied after a later one of their key", what)
}

func TestBalanceSharesPartitionsOutAndMovesFewOnJoinLeaveAndKill(t *testing.T) {
	b := newBalanced(t, 12)
	m1, m2, m3 := b.join(), b.join(), b.join()
	b.settle([]int{4, 4, 4}, m1, m2, m3)
	before := assignment(m1, m2, m3)

	m4 := b.join() // 3→4: at most ⌈12/4⌉ = 3 move, all to m4
	took := b.settle([]int{3, 3, 3, 3}, m1, m2, m3, m4)
	after := assignment(m1, m2, m3, m4)
	b.report("join 3→4", took, movedBetween(before, after), m1, m2, m3, m4)
	assert.Equal(t, 3, movedBetween(before, after), "partitions moved by a join: %v → %v", before, after)
	for i := range after {
		if after[i] != before[i] {
			assert.Equal(t, "m4", after[i], "a join moves partitions to the joiner only: %v → %v", before, after)
		}
	}

	before = after
	require.NoError(t, m2.run.close(t, 10*time.Second)) // 4→3: leaves, its key goes at once
	took = b.settle([]int{4, 4, 4}, m1, m3, m4)
	after = assignment(m1, m3, m4)
	b.report("leave 4→3", took, movedBetween(before, after), m1, m3, m4)
	for i := range after {
		if after[i] != before[i] {
			assert.Equal(t, "m2", before[i], "a leave moves the leaver's partitions only: %v → %v", before, after)
		}
	}

	before = after
	m3.kill() // no Close, no heartbeat: its key expires
	took = b.settle([]int{6, 6}, m1, m4)
	after = assignment(m1, m4)
	b.report("kill 3→2", took, movedBetween(before, after), m1, m4)
	for i := range after {
		if after[i] != before[i] {
			assert.Equal(t, "m3", before[i], "a kill moves the dead member's partitions only: %v → %v", before, after)
		}
	}
}

// A member that steps down lets its running handlers finish and
// acknowledges them before it unpins: the assignee neither waits for
// their AckWait nor runs them again.
func TestBalanceStepDownFinishesWhatRuns(t *testing.T) {
	b := newBalanced(t, 2)
	rec := recordingHandler{records: make(chan slog.Record, 64)}
	b.logger = slog.New(rec)
	m1 := b.join()
	b.settle([]int{2}, m1)
	for i := range b.parts {
		publish(t, b.js, fmt.Sprintf("p.%d.gate", i), "x") // each runs on m1, and waits
		b.seq.Add(1)
	}
	eventually(t, func() bool { return m1.c.Stats().InFlight == 2 }, "both gated messages running on m1: %+v", statsOf(m1.c))
	m2 := b.join()
	// m1 steps down from one partition, whose message still runs: it
	// either waits for it (the record) or drops it (the partition lost).
	deadline := time.After(20 * time.Second)
	for stepping := false; !stepping; {
		select {
		case r := <-rec.records:
			stepping = strings.HasPrefix(r.Message, "seqjetstream: stepping down") || strings.HasPrefix(r.Message, "seqjetstream: partition lost")
		case <-deadline:
			t.Fatalf("m1 did not step down: %+v", m1.c.Stats())
		}
	}
	close(b.gate)
	took := b.settle([]int{1, 1}, m1, m2)
	b.report("step-down with a handler running", took, 1, m1, m2)
	assert.Zero(t, b.store.snapshot().dups, "messages applied twice: the stepping-down member's answers were dropped")
}

// The bucket deleted, then a member killed: its partitions must not be
// orphaned. While the bucket is missing the survivors pull for every
// partition, and they make the bucket again.
func TestBalanceSurvivesItsBucketDeletedAndAKill(t *testing.T) {
	b := newBalanced(t, 6)
	m1, m2, m3 := b.join(), b.join(), b.join()
	b.settle([]int{2, 2, 2}, m1, m2, m3)
	before := assignment(m1, m2, m3)

	require.NoError(t, b.js.DeleteKeyValue(context.Background(), "owners"))
	m2.kill()
	took := b.settle([]int{3, 3}, m1, m3)
	after := assignment(m1, m3)
	b.report("bucket deleted, then a kill", took, movedBetween(before, after), m1, m3)
	onlyTheDeads(t, before, after, "m2")

	kv, err := b.js.KeyValue(context.Background(), "owners")
	require.NoError(t, err, "the bucket made again")
	st, err := kv.Status(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, st.TTL(), "made again as it was")
}

// Membership unavailable for longer than the bucket's TTL (the bucket
// deleted, and refused when the members make it again), then a member
// killed: its partitions must not be orphaned. The survivors fall back to
// pulling for every partition, as without WithBalance, and the server
// moves the dead member's pins to them after PinnedTTL. Without the
// fall-back they kept their last assignment, and the dead member's
// partitions stopped.
func TestBalanceWithoutMembershipFallsBackToPullingEveryPartition(t *testing.T) {
	b := newBalanced(t, 6)
	m1, m2, m3 := b.join(), b.join(), b.join()
	b.settle([]int{2, 2, 2}, m1, m2, m3)
	before := owners(m1, m2, m3)

	b.kvDown.Store(true)
	require.NoError(t, b.js.DeleteKeyValue(context.Background(), "owners"))
	m2.kill()
	took := b.settleOwned(m1, m3)
	after := owners(m1, m3)
	b.report("membership unavailable, then a kill", took, movedBetween(before, after), m1, m3)
	onlyTheDeads(t, before, after, "m2")
	for _, m := range []*member{m1, m3} {
		for _, cs := range m.c.Stats().Consumers {
			assert.True(t, cs.Assigned, "%s: %s assigned while membership is unavailable", m.name, cs.Consumer)
		}
	}
}

// A server restart (stream and bucket on file), then a member killed.
func TestBalanceSurvivesAServerRestartAndAKill(t *testing.T) {
	srv := startRestartable(t)
	b := newBalancedWith(t, 6, balancedOpts{url: srv.url, storage: jetstream.FileStorage})
	m1, m2, m3 := b.join(), b.join(), b.join()
	b.settle([]int{2, 2, 2}, m1, m2, m3)
	before := assignment(m1, m2, m3)

	srv.restart()
	m3.kill()
	took := b.settle([]int{3, 3}, m1, m2)
	after := assignment(m1, m2)
	b.report("server restarted, then a kill", took, movedBetween(before, after), m1, m2)
	onlyTheDeads(t, before, after, "m3")
}

// A member started before its bucket exists runs, makes the bucket (file
// storage, the smallest PinnedTTL as its TTL) and shares the partitions
// out with the next.
func TestBalanceMakesAMissingBucket(t *testing.T) {
	b := newBalancedWith(t, 4, balancedOpts{storage: jetstream.MemoryStorage, noBucket: true})
	m1 := b.join()
	b.settle([]int{4}, m1)
	m2 := b.join()
	took := b.settle([]int{2, 2}, m1, m2)
	b.report("started without a bucket", took, 2, m1, m2)

	kv, err := b.js.KeyValue(context.Background(), "owners")
	require.NoError(t, err)
	st, err := kv.Status(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 4*time.Second, st.TTL(), "the smallest PinnedTTL")
	assert.Equal(t, jetstream.FileStorage, st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Storage)
}

// onlyTheDeads checks that the partitions that moved were dead's.
func onlyTheDeads(t *testing.T, before, after []string, dead string) {
	t.Helper()
	for i := range after {
		if after[i] != before[i] {
			assert.Equal(t, dead, before[i], "only the dead member's partitions move: %v → %v", before, after)
		}
	}
}

// restartable is a nats-server that a test restarts, on the same port
// and store directory.
type restartable struct {
	t    *testing.T
	opts server.Options
	url  string
	mu   sync.Mutex
	srv  *server.Server
}

func startRestartable(t *testing.T) *restartable {
	r := &restartable{t: t, opts: server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	}}
	r.start()
	r.opts.Port = r.srv.Addr().(*net.TCPAddr).Port
	r.url = r.srv.ClientURL()
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.srv.Shutdown()
		r.srv.WaitForShutdown()
	})
	return r
}

func (r *restartable) start() {
	opts := r.opts
	srv, err := server.NewServer(&opts)
	require.NoError(r.t, err)
	srv.Start()
	require.True(r.t, srv.ReadyForConnections(10*time.Second), "nats-server not ready")
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
}

// restart stops the server and starts it again on its port and store.
func (r *restartable) restart() {
	r.mu.Lock()
	old := r.srv
	r.mu.Unlock()
	old.Shutdown()
	old.WaitForShutdown()
	r.start()
}

// orderStore applies messages as a handler's store would, skipping a
// sequence at or below its key's last one: a message that comes after a
// later one of its key is never applied, so count shows order violations
// as well as losses.
type orderStore struct {
	mu      sync.Mutex
	last    map[string]uint64
	applied map[uint64]bool
	dups    int // a sequence applied already
	gaps    int // a sequence below its key's last applied, never applied
}

func newOrderStore() *orderStore {
	return &orderStore{last: make(map[string]uint64), applied: make(map[uint64]bool)}
}

func (s *orderStore) apply(key string, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.applied[seq]:
		s.dups++
		return
	case seq <= s.last[key]:
		s.gaps++
		return
	}
	s.last[key] = seq
	s.applied[seq] = true
}

func (s *orderStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.applied)
}

type storeSnapshot struct{ applied, dups, gaps int }

func (s *orderStore) snapshot() storeSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return storeSnapshot{len(s.applied), s.dups, s.gaps}
}

func TestBalanceRefusesABucketItCannotUse(t *testing.T) {
	b := newBalanced(t, 1)
	_, err := b.js.CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{
		Bucket: "slow", TTL: 5 * time.Second, Storage: jetstream.MemoryStorage, // above the PinnedTTL, 4s
	})
	require.NoError(t, err)
	_, err = b.js.CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "forever", Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	cons, err := b.js.Consumer(context.Background(), "S", "part-0")
	require.NoError(t, err)
	runWith := func(bucket string) error {
		c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, nop, seqjetstream.WithBalance(b.js, bucket), seqjetstream.WithLogger(discard))
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close(context.Background())) }()
		return c.Run(context.Background())
	}

	err = runWith("slow")
	assert.ErrorIs(t, err, seqjetstream.ErrInvalidOption)
	assert.ErrorContains(t, err, `WithBalance(js, "slow"): the bucket's TTL 5s is above the PinnedTTL 4s of consumer S/part-0`)
	err = runWith("forever")
	assert.ErrorIs(t, err, seqjetstream.ErrInvalidOption)
	assert.ErrorContains(t, err, `WithBalance(js, "forever"): the bucket has no TTL`)

	f := newFixture(t, jetstream.ConsumerConfig{})
	_, err = seqjetstream.NewConsumer([]jetstream.Consumer{f.cons}, nop, seqjetstream.WithBalance(f.js, "owners"))
	assert.ErrorIs(t, err, seqjetstream.ErrInvalidOption)
	assert.ErrorContains(t, err, `WithBalance(js, "owners"): no pinned consumer to share out`)
	_, err = seqjetstream.NewConsumer([]jetstream.Consumer{cons}, nop, seqjetstream.WithBalance(nil, ""))
	assert.ErrorContains(t, err, `WithBalance(nil, ""): js must not be nil`)
	_, err = seqjetstream.NewConsumer([]jetstream.Consumer{cons}, nop, seqjetstream.WithBalance(b.js, ""))
	assert.ErrorContains(t, err, `WithBalance(js, ""): bucket must not be empty`)
}

// A member whose key went (it expired while the member stalled, or was
// deleted) cannot know whether the others shared its partitions out
// meanwhile: it joins again, and says so at Warn. The server tells it,
// by the key's revision, not its own clock: a heartbeat that is late but
// finds its key still there keeps its claim.
func TestBalanceAMemberWhoseKeyWentJoinsAgainAndSaysSo(t *testing.T) {
	b := newBalanced(t, 2)
	rec := recordingHandler{records: make(chan slog.Record, 64)}
	b.logger = slog.New(rec)
	m1 := b.join()
	b.settle([]int{2}, m1)

	kv, err := b.js.KeyValue(context.Background(), "owners")
	require.NoError(t, err)
	keys, err := kv.ListKeys(context.Background())
	require.NoError(t, err)
	var ids []string
	for k := range keys.Keys() {
		ids = append(ids, k)
	}
	require.Len(t, ids, 1, "m1's key")
	require.NoError(t, kv.Purge(context.Background(), ids[0]))

	deadline := time.After(20 * time.Second)
	for joined := false; !joined; {
		select {
		case r := <-rec.records:
			joined = strings.HasPrefix(r.Message, "seqjetstream: this instance's membership key was gone")
		case <-deadline:
			t.Fatalf("m1 did not say that its key was gone: %+v", m1.c.Stats())
		}
	}
	took := b.settle([]int{2}, m1)
	b.report("a member's key gone", took, 0, m1)
	// Joining again puts the key with an empty claim; a later heartbeat
	// claims the partitions (they never moved: settle may return at
	// once, before it).
	claim := func() string {
		e, err := kv.Get(context.Background(), ids[0])
		if err != nil {
			return err.Error()
		}
		return string(e.Value())
	}
	eventually(t, func() bool { return claim() == `["S.part-0","S.part-1"]` }, "m1's claim, after joining again: %v", lazy(func() any { return claim() }))
}
