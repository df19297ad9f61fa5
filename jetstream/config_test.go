package jetstream_test

import (
	"context"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/jetstream"
)

func nop(context.Context, natsjs.Msg) error { return nil }

func TestNewConsumerRefusesConsumersItCannotServeSafely(t *testing.T) {
	_, js := connect(t, startServer(t))
	s := newStream(t, js, natsjs.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
	mk := func(name string, cc natsjs.ConsumerConfig) natsjs.Consumer {
		cc.Durable = name
		if cc.AckPolicy == 0 {
			cc.AckPolicy = natsjs.AckExplicitPolicy
		}
		c, err := s.CreateOrUpdateConsumer(context.Background(), cc)
		require.NoError(t, err)
		return c
	}
	good := mk("good", natsjs.ConsumerConfig{})
	pinned := mk("pinned", natsjs.ConsumerConfig{PriorityPolicy: natsjs.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 2 * time.Second})
	cases := []struct {
		name string
		cons []natsjs.Consumer
		opts []jetstream.Option
		want []string
	}{
		{"MaxAckPending above the bound", []natsjs.Consumer{mk("big", natsjs.ConsumerConfig{MaxAckPending: 2000})}, nil,
			[]string{"consumer S/big: MaxAckPending 2000 above WithMaxBuffered(1000)"}},
		{"MaxAckPending unlimited", []natsjs.Consumer{mk("unlimited", natsjs.ConsumerConfig{MaxAckPending: -1})}, nil,
			[]string{"consumer S/unlimited: MaxAckPending -1 (unlimited)"}},
		{"acks not explicit", []natsjs.Consumer{mk("none", natsjs.ConsumerConfig{AckPolicy: natsjs.AckNonePolicy})}, nil,
			[]string{"consumer S/none: AckPolicy AckNone: must be explicit"}},
		{"AckWait too short", []natsjs.Consumer{mk("short", natsjs.ConsumerConfig{AckWait: 50 * time.Millisecond})}, nil,
			[]string{"consumer S/short: AckWait (or a BackOff step) of 50ms: must be >= 100ms"}},
		{"BackOff step too short", []natsjs.Consumer{mk("backoff", natsjs.ConsumerConfig{MaxDeliver: 5, BackOff: []time.Duration{10 * time.Millisecond, time.Second}})}, nil,
			[]string{"consumer S/backoff: AckWait (or a BackOff step) of 10ms"}},
		{"overflow policy", []natsjs.Consumer{mk("overflow", natsjs.ConsumerConfig{PriorityPolicy: natsjs.PriorityPolicyOverflow, PriorityGroups: []string{"g"}})}, nil,
			[]string{"consumer S/overflow: PriorityPolicy overflow not supported"}},
		{"AckWait too short for a pinned consumer", []natsjs.Consumer{mk("pinshort", natsjs.ConsumerConfig{AckWait: 250 * time.Millisecond,
			PriorityPolicy: natsjs.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 2 * time.Second})}, nil,
			[]string{"consumer S/pinshort: AckWait (or a BackOff step) of 250ms on a pinned consumer: must be >= 300ms"}},
		{"PinnedTTL not above the fetch expiry", []natsjs.Consumer{pinned}, []jetstream.Option{jetstream.WithFetchExpiry(2 * time.Second)},
			[]string{"consumer S/pinned: PinnedTTL 2s not above WithFetchExpiry(2s)"}},
		{"MaxRequestBatch below MaxAckPending", []natsjs.Consumer{mk("batch", natsjs.ConsumerConfig{MaxAckPending: 100, MaxRequestBatch: 10})}, nil,
			[]string{"consumer S/batch: MaxRequestBatch 10 below MaxAckPending 100"}},
		{"MaxRequestExpires below the fetch expiry", []natsjs.Consumer{mk("expires", natsjs.ConsumerConfig{MaxRequestExpires: time.Second})},
			[]jetstream.Option{jetstream.WithFetchExpiry(2 * time.Second)},
			[]string{"consumer S/expires: MaxRequestExpires 1s below WithFetchExpiry(2s)"}},
		{"MaxRequestExpires below the default fetch expiry", []natsjs.Consumer{mk("expires2", natsjs.ConsumerConfig{MaxRequestExpires: time.Second})}, nil,
			[]string{"consumer S/expires2: MaxRequestExpires 1s below the pull expiry 5s"}},
		{"MaxRequestExpires below a pinned consumer's pull expiry", []natsjs.Consumer{mk("pinexpires", natsjs.ConsumerConfig{MaxRequestExpires: 200 * time.Millisecond,
			AckWait: 3 * time.Second, PriorityPolicy: natsjs.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 10 * time.Second})}, nil,
			[]string{"consumer S/pinexpires: MaxRequestExpires 200ms below the pull expiry 1s"}},
		{"MaxDeliver 1 on a pinned consumer", []natsjs.Consumer{mk("once", natsjs.ConsumerConfig{MaxDeliver: 1,
			PriorityPolicy: natsjs.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 2 * time.Second})}, nil,
			[]string{"consumer S/once: MaxDeliver 1 on a pinned consumer"}},
		{"the same consumer twice", []natsjs.Consumer{good, good}, nil, []string{"consumer S/good: given twice"}},
		{"a nil consumer", []natsjs.Consumer{good, nil}, nil, []string{"consumer ?/#1: nil consumer"}},
		{"several at once, with bad options", []natsjs.Consumer{mk("big2", natsjs.ConsumerConfig{MaxAckPending: 2000}), nil},
			[]jetstream.Option{jetstream.WithMaxConcurrency(0), jetstream.WithRetries(0, nil), nil},
			[]string{"WithMaxConcurrency(0): must be >= 1", "WithRetries(0, nil): attempts must be >= 1", "nil Option",
				"consumer S/big2: MaxAckPending 2000", "consumer ?/#1: nil consumer"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := jetstream.NewConsumer(tc.cons, nop, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, c)
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w)
			}
			var ce *jetstream.ConsumerError
			if assert.ErrorAs(t, err, &ce) {
				assert.ErrorIs(t, err, jetstream.ErrConsumerConfig)
				assert.ErrorIs(t, err, jetstream.ErrInvalidOption, "a setting refused")
			}
		})
	}

	// The pairings that work: MaxAckPending at the bound, MaxRequestBatch
	// at MaxAckPending, MaxRequestExpires at the fetch expiry, MaxDeliver 2
	// on a pinned consumer and 1 on a plain one.
	c, err := jetstream.NewConsumer([]natsjs.Consumer{
		mk("fits", natsjs.ConsumerConfig{MaxAckPending: 50, MaxRequestBatch: 50, MaxRequestExpires: time.Second}),
		mk("twice", natsjs.ConsumerConfig{MaxAckPending: 50, MaxDeliver: 2, PriorityPolicy: natsjs.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 2 * time.Second}),
		mk("plainonce", natsjs.ConsumerConfig{MaxAckPending: 50, MaxDeliver: 1}),
	}, nop, jetstream.WithMaxBuffered(50), jetstream.WithFetchExpiry(time.Second))
	require.NoError(t, err)
	require.NoError(t, c.Close(context.Background()))
}

func TestBadOptionsAreOneErrorNamingEach(t *testing.T) {
	_, js := connect(t, startServer(t))
	s := newStream(t, js, natsjs.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
	cons := []natsjs.Consumer{newConsumer(t, s, natsjs.ConsumerConfig{Durable: "d"})}

	_, err := jetstream.NewConsumer(cons, nil)
	assert.ErrorIs(t, err, jetstream.ErrNilHandler)
	_, err = jetstream.NewConsumer(nil, nop)
	assert.ErrorIs(t, err, jetstream.ErrNoConsumers)

	_, err = jetstream.NewConsumer(cons, nop,
		jetstream.WithMaxConcurrency(0),
		jetstream.WithMaxBuffered(0),
		jetstream.WithRetries(0, nil),
		jetstream.WithDeadLetter(nil),
		jetstream.WithKeyHeader(""),
		jetstream.WithKeyFunc(nil),
		jetstream.WithPriorityHeader(""),
		jetstream.WithFetchExpiry(time.Millisecond),
		jetstream.WithHandover(nil),
		jetstream.WithLogger(nil),
	)
	require.ErrorIs(t, err, jetstream.ErrInvalidOption)
	var oe *jetstream.OptionError
	require.ErrorAs(t, err, &oe)
	for _, w := range []string{
		"seqsched/jetstream: WithMaxConcurrency(0): must be >= 1: invalid option",
		"WithMaxBuffered(0): must be >= 1",
		"WithRetries(0, nil): attempts must be >= 1",
		"WithDeadLetter(nil): must not be nil",
		`WithKeyHeader(""): must not be empty`,
		"WithKeyFunc(nil): must not be nil",
		`WithPriorityHeader(""): must not be empty`,
		"WithFetchExpiry(1ms): must be >= 100ms",
		"WithHandover(nil): must not be nil",
		"WithLogger(nil): must not be nil",
	} {
		assert.ErrorContains(t, err, w)
	}

	_, err = jetstream.NewConsumer(cons, nop, jetstream.WithKeyHeader("K"), jetstream.WithKeyFunc(func(natsjs.Msg) string { return "" }))
	assert.ErrorContains(t, err, "WithKeyFunc and WithKeyHeader: choose one")

	_, err = jetstream.DeadLetterSubject(nil, "")
	assert.ErrorIs(t, err, jetstream.ErrInvalidOption)
	assert.ErrorContains(t, err, "js must not be nil")
	assert.ErrorContains(t, err, "subject must not be empty")

	assert.Equal(t, "WithMaxBuffered(5)", jetstream.WithMaxBuffered(5).String())
}

// A pull asks for no more than the consumer's MaxAckPending, so a
// MaxRequestBatch at MaxAckPending (below WithMaxBuffered) is honoured:
// the server accepts every pull and everything is consumed.
func TestPullsAskForNoMoreThanMaxAckPending(t *testing.T) {
	f := newFixture(t, natsjs.ConsumerConfig{MaxAckPending: 5, MaxRequestBatch: 5})
	l := newLedger()
	c := f.consumer(t, func(ctx context.Context, m natsjs.Msg) error {
		l.apply("k", seqOf(t, m))
		return nil
	}, jetstream.WithMaxBuffered(100), jetstream.WithFetchExpiry(200*time.Millisecond), jetstream.WithLogger(discard))
	start(t, c)
	for range 12 {
		publish(t, f.js, "k.a", "x")
	}
	eventually(t, func() bool { return l.count() == 12 }, "twelve applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Equal(t, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, l.key("k"))
}
