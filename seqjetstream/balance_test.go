package seqjetstream_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqjetstream"
)

// The guarantee of this file: with WithBalance, the partitions are shared
// out evenly among the instances (no instance owns more than one above
// another once membership settles) and move when one joins or leaves,
// keeping each key's order and losing nothing.

// balanced is a stream of parts partitions, each a pinned consumer
// part-<i> of subjects p.<i>.*, and a membership bucket "owners" whose
// TTL is below the PinnedTTL.
type balanced struct {
	t     *testing.T
	url   string
	js    jetstream.JetStream
	parts int
	store *orderStore
	seq   atomic.Uint64 // messages published
}

func newBalanced(t *testing.T, parts int) *balanced {
	url := startServer(t)
	_, js := connect(t, url)
	s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"p.*.*"}})
	for i := range parts {
		newConsumer(t, s, jetstream.ConsumerConfig{
			Durable: fmt.Sprint("part-", i), FilterSubject: fmt.Sprintf("p.%d.*", i),
			AckWait: 500 * time.Millisecond, MaxAckPending: 100,
			PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 2 * time.Second,
		})
	}
	_, err := js.CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{
		Bucket: "owners", TTL: 1500 * time.Millisecond, Storage: jetstream.MemoryStorage,
	})
	require.NoError(t, err)
	return &balanced{t: t, url: url, js: js, parts: parts, store: newOrderStore()}
}

// member is one instance: its own connection, every partition's consumer.
type member struct {
	nc   *nats.Conn
	c    *seqjetstream.Consumer
	run  *running
	dead atomic.Bool // killed: applies nothing more, as a dead process
}

func (b *balanced) join() *member {
	t := b.t
	nc, js := connect(t, b.url)
	var cons []jetstream.Consumer
	for i := range b.parts {
		cn, err := js.Consumer(context.Background(), "S", fmt.Sprint("part-", i))
		require.NoError(t, err)
		cons = append(cons, cn)
	}
	m := &member{nc: nc}
	c, err := seqjetstream.NewConsumer(cons, func(ctx context.Context, msg jetstream.Msg) error {
		if m.dead.Load() {
			return fmt.Errorf("dead")
		}
		b.store.apply(msg.Subject(), seqjetstream.Sequence(ctx))
		return nil
	}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(300*time.Millisecond),
		seqjetstream.WithBalance(js, "owners"), seqjetstream.WithLogger(discard))
	require.NoError(t, err)
	m.c = c
	m.run = start(t, c)
	return m
}

// round publishes one message to each partition, under key k<round>.
func (b *balanced) round(key string) {
	for i := range b.parts {
		publish(b.t, b.js, fmt.Sprintf("p.%d.%s", i, key), "x")
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

// settle publishes rounds until the live members own want partitions
// each, in order, and every message published is applied.
func (b *balanced) settle(want []int, live ...*member) {
	t := b.t
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for r := 0; ; r++ {
		b.round(fmt.Sprint("k", r%3))
		got := make([]int, len(live))
		for i, m := range live {
			got[i] = owned(m.c)
		}
		if fmt.Sprint(got) == fmt.Sprint(want) && b.store.count() == int(b.seq.Load()) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions owned %v; want %v; applied %d of %d", got, want, b.store.count(), b.seq.Load())
		}
		time.Sleep(100 * time.Millisecond) // a publishing rhythm, not a synchronisation
	}
}

func TestBalanceSharesPartitionsOutAndMovesThemOnJoinLeaveAndKill(t *testing.T) {
	b := newBalanced(t, 6)
	a := b.join()
	b.settle([]int{6}, a)
	bb := b.join()
	b.settle([]int{3, 3}, a, bb)
	c := b.join()
	b.settle([]int{2, 2, 2}, a, bb, c)

	assigned := 0
	for _, m := range []*member{a, bb, c} {
		for _, cs := range m.c.Stats().Consumers {
			if cs.Assigned {
				assigned++
			}
		}
	}
	assert.Equal(t, 6, assigned, "partitions assigned, over the instances")

	require.NoError(t, a.run.close(t, 10*time.Second)) // leaves: its key goes at once
	b.settle([]int{3, 3}, bb, c)

	bb.dead.Store(true) // killed: no Close, no heartbeat, its key expires
	bb.nc.Close()
	b.settle([]int{6}, c)

	assert.Equal(t, int(b.seq.Load()), b.store.count(), "applied, each in its key's order")
}

// orderStore applies messages as a handler's store would, skipping a
// sequence at or below its key's last one: a message that comes after a
// later one of its key is never applied, so count shows order violations
// as well as losses.
type orderStore struct {
	mu      sync.Mutex
	last    map[string]uint64
	applied map[uint64]bool
}

func newOrderStore() *orderStore {
	return &orderStore{last: make(map[string]uint64), applied: make(map[uint64]bool)}
}

func (s *orderStore) apply(key string, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.last[key] {
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

func TestBalanceRefusesABucketItCannotUse(t *testing.T) {
	b := newBalanced(t, 1)
	_, err := b.js.CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{
		Bucket: "slow", TTL: 5 * time.Second, Storage: jetstream.MemoryStorage, // above the PinnedTTL, 2s
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

	err = runWith("missing")
	assert.ErrorIs(t, err, jetstream.ErrBucketNotFound)
	assert.ErrorContains(t, err, `seqjetstream: WithBalance(js, "missing")`)
	err = runWith("slow")
	assert.ErrorIs(t, err, seqjetstream.ErrInvalidOption)
	assert.ErrorContains(t, err, `WithBalance(js, "slow"): the bucket's TTL 5s is above the PinnedTTL 2s of consumer S/part-0`)
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
