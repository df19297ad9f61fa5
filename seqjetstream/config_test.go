package seqjetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqjetstream"
)

func nop(context.Context, jetstream.Msg) error { return nil }

func TestNewConsumerRefusesConsumersItCannotServeSafely(t *testing.T) {
	_, js := connect(t, startServer(t))
	s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
	mk := func(name string, cc jetstream.ConsumerConfig) jetstream.Consumer {
		cc.Durable = name
		if cc.AckPolicy == 0 {
			cc.AckPolicy = jetstream.AckExplicitPolicy
		}
		c, err := s.CreateOrUpdateConsumer(context.Background(), cc)
		require.NoError(t, err)
		return c
	}
	good := mk("good", jetstream.ConsumerConfig{})
	pinned := mk("pinned", jetstream.ConsumerConfig{PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 2 * time.Second})
	cases := []struct {
		name string
		cons []jetstream.Consumer
		opts []seqjetstream.Option
		want []string
	}{
		{"MaxAckPending above the bound", []jetstream.Consumer{mk("big", jetstream.ConsumerConfig{MaxAckPending: 2000})}, nil,
			[]string{"consumer S/big: MaxAckPending 2000 above WithMaxBuffered(1000)"}},
		{"MaxAckPending unlimited", []jetstream.Consumer{mk("unlimited", jetstream.ConsumerConfig{MaxAckPending: -1})}, nil,
			[]string{"consumer S/unlimited: MaxAckPending -1 (unlimited)"}},
		{"acks not explicit", []jetstream.Consumer{mk("none", jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy})}, nil,
			[]string{"consumer S/none: AckPolicy AckNone: must be explicit"}},
		{"AckWait too short", []jetstream.Consumer{mk("short", jetstream.ConsumerConfig{AckWait: 50 * time.Millisecond})}, nil,
			[]string{"consumer S/short: AckWait (or a BackOff step) of 50ms: must be >= 100ms"}},
		{"BackOff step too short", []jetstream.Consumer{mk("backoff", jetstream.ConsumerConfig{MaxDeliver: 5, BackOff: []time.Duration{10 * time.Millisecond, time.Second}})}, nil,
			[]string{"consumer S/backoff: AckWait (or a BackOff step) of 10ms"}},
		{"overflow policy", []jetstream.Consumer{mk("overflow", jetstream.ConsumerConfig{PriorityPolicy: jetstream.PriorityPolicyOverflow, PriorityGroups: []string{"g"}})}, nil,
			[]string{"consumer S/overflow: PriorityPolicy overflow not supported"}},
		{"AckWait too short for a pinned consumer", []jetstream.Consumer{mk("pinshort", jetstream.ConsumerConfig{AckWait: 250 * time.Millisecond,
			PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 2 * time.Second})}, nil,
			[]string{"consumer S/pinshort: AckWait (or a BackOff step) of 250ms on a pinned consumer: must be >= 300ms"}},
		{"PinnedTTL not above the fetch expiry", []jetstream.Consumer{pinned}, []seqjetstream.Option{seqjetstream.WithFetchExpiry(2 * time.Second)},
			[]string{"consumer S/pinned: PinnedTTL 2s not above WithFetchExpiry(2s)"}},
		{"PinnedTTL not above the default pull expiry", []jetstream.Consumer{mk("pinfast", jetstream.ConsumerConfig{
			PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 100 * time.Millisecond})}, nil,
			[]string{"consumer S/pinfast: PinnedTTL 100ms not above the pull expiry 100ms (at least 100ms)"}},
		{"MaxRequestBatch below MaxAckPending", []jetstream.Consumer{mk("batch", jetstream.ConsumerConfig{MaxAckPending: 100, MaxRequestBatch: 10})}, nil,
			[]string{"consumer S/batch: MaxRequestBatch 10 below MaxAckPending 100"}},
		{"MaxRequestExpires below the fetch expiry", []jetstream.Consumer{mk("expires", jetstream.ConsumerConfig{MaxRequestExpires: time.Second})},
			[]seqjetstream.Option{seqjetstream.WithFetchExpiry(2 * time.Second)},
			[]string{"consumer S/expires: MaxRequestExpires 1s below WithFetchExpiry(2s)"}},
		{"MaxRequestExpires below the default fetch expiry", []jetstream.Consumer{mk("expires2", jetstream.ConsumerConfig{MaxRequestExpires: time.Second})}, nil,
			[]string{"consumer S/expires2: MaxRequestExpires 1s below the pull expiry 5s"}},
		{"MaxRequestExpires below a pinned consumer's pull expiry", []jetstream.Consumer{mk("pinexpires", jetstream.ConsumerConfig{MaxRequestExpires: 200 * time.Millisecond,
			AckWait: 3 * time.Second, PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 10 * time.Second})}, nil,
			[]string{"consumer S/pinexpires: MaxRequestExpires 200ms below the pull expiry 1s"}},
		{"MaxDeliver 1 on a pinned consumer", []jetstream.Consumer{mk("once", jetstream.ConsumerConfig{MaxDeliver: 1,
			PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 2 * time.Second})}, nil,
			[]string{"consumer S/once: MaxDeliver 1 on a pinned consumer"}},
		{"the same consumer twice", []jetstream.Consumer{good, good}, nil, []string{"consumer S/good: given twice"}},
		{"a nil consumer", []jetstream.Consumer{good, nil}, nil, []string{"consumer ?/#1: nil consumer"}},
		{"several at once, with bad options", []jetstream.Consumer{mk("big2", jetstream.ConsumerConfig{MaxAckPending: 2000}), nil},
			[]seqjetstream.Option{seqjetstream.WithMaxConcurrency(0), seqjetstream.WithRetries(0, nil), nil},
			[]string{"WithMaxConcurrency(0): must be >= 1", "WithRetries(0, nil): attempts must be >= 1", "nil Option",
				"consumer S/big2: MaxAckPending 2000", "consumer ?/#1: nil consumer"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := seqjetstream.NewConsumer(tc.cons, nop, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, c)
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w)
			}
			var ce *seqjetstream.ConsumerError
			if assert.ErrorAs(t, err, &ce) {
				assert.ErrorIs(t, err, seqjetstream.ErrConsumerConfig)
				assert.ErrorIs(t, err, seqjetstream.ErrInvalidOption, "a setting refused")
			}
		})
	}

	// The pairings that work: MaxAckPending at the bound, MaxRequestBatch
	// at MaxAckPending, MaxRequestExpires at the fetch expiry, MaxDeliver 2
	// on a pinned consumer and 1 on a plain one.
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{
		mk("fits", jetstream.ConsumerConfig{MaxAckPending: 50, MaxRequestBatch: 50, MaxRequestExpires: time.Second}),
		mk("twice", jetstream.ConsumerConfig{MaxAckPending: 50, MaxDeliver: 2, PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: 2 * time.Second}),
		mk("plainonce", jetstream.ConsumerConfig{MaxAckPending: 50, MaxDeliver: 1}),
	}, nop, seqjetstream.WithMaxBuffered(50), seqjetstream.WithFetchExpiry(time.Second))
	require.NoError(t, err)
	require.NoError(t, c.Close(context.Background()))
}

func TestBadOptionsAreOneErrorNamingEach(t *testing.T) {
	_, js := connect(t, startServer(t))
	s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
	cons := []jetstream.Consumer{newConsumer(t, s, jetstream.ConsumerConfig{Durable: "d"})}

	_, err := seqjetstream.NewConsumer(cons, nil)
	assert.ErrorIs(t, err, seqjetstream.ErrNilHandler)
	_, err = seqjetstream.NewConsumer(nil, nop)
	assert.ErrorIs(t, err, seqjetstream.ErrNoConsumers)

	_, err = seqjetstream.NewConsumer(cons, nop,
		seqjetstream.WithMaxConcurrency(0),
		seqjetstream.WithMaxBuffered(0),
		seqjetstream.WithRetries(0, nil),
		seqjetstream.WithDeadLetter(nil),
		seqjetstream.WithKeyHeader(""),
		seqjetstream.WithKeyFunc(nil),
		seqjetstream.WithPriorityHeader(""),
		seqjetstream.WithFetchExpiry(time.Millisecond),
		seqjetstream.WithHandover(nil),
		seqjetstream.WithLogger(nil),
		seqjetstream.WithInterceptor(nil),
	)
	require.ErrorIs(t, err, seqjetstream.ErrInvalidOption)
	var oe *seqjetstream.OptionError
	require.ErrorAs(t, err, &oe)
	for _, w := range []string{
		"seqjetstream: WithMaxConcurrency(0): must be >= 1: invalid option",
		"WithMaxBuffered(0): must be >= 1",
		"WithRetries(0, nil): attempts must be >= 1",
		"WithDeadLetter(nil): must not be nil",
		`WithKeyHeader(""): must not be empty`,
		"WithKeyFunc(nil): must not be nil",
		`WithPriorityHeader(""): must not be empty`,
		"WithFetchExpiry(1ms): must be >= 100ms",
		"WithHandover(nil): must not be nil",
		"WithLogger(nil): must not be nil",
		"WithInterceptor(nil): must not be nil",
	} {
		assert.ErrorContains(t, err, w)
	}

	_, err = seqjetstream.NewConsumer(cons, nop, seqjetstream.WithKeyHeader("K"), seqjetstream.WithKeyFunc(func(jetstream.Msg) string { return "" }))
	assert.ErrorContains(t, err, "WithKeyFunc and WithKeyHeader: choose one")

	_, err = seqjetstream.DeadLetterSubject(nil, "")
	assert.ErrorIs(t, err, seqjetstream.ErrInvalidOption)
	assert.ErrorContains(t, err, "js must not be nil")
	assert.ErrorContains(t, err, "subject must not be empty")

	assert.Equal(t, "WithMaxBuffered(5)", seqjetstream.WithMaxBuffered(5).String())
}

// A pull asks for no more than the consumer's MaxAckPending, so a
// MaxRequestBatch at MaxAckPending (below WithMaxBuffered) is honoured:
// the server accepts every pull and everything is consumed.
func TestPullsAskForNoMoreThanMaxAckPending(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{MaxAckPending: 5, MaxRequestBatch: 5})
	l := newLedger()
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		l.apply("k", seqOf(t, m))
		return nil
	}, seqjetstream.WithMaxBuffered(100), seqjetstream.WithFetchExpiry(200*time.Millisecond), seqjetstream.WithLogger(discard))
	start(t, c)
	for range 12 {
		publish(t, f.js, "k.a", "x")
	}
	eventually(t, func() bool { return l.count() == 12 }, "twelve applied: %v; %+v", lazy(func() any { return l.key("k") }), statsOf(c))
	assert.Equal(t, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, l.key("k"))
}
