package seqwatermill_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqwatermill"
)

// How the decorator meets watermill's middleware, as the README states it.

// runRouter runs a Router over sub with the decorator (opts) and mw, until
// the test ends.
func runRouter(t *testing.T, sub message.Subscriber, h message.NoPublishHandlerFunc, mw []message.HandlerMiddleware, opts ...seqwatermill.Option) {
	t.Helper()
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(mw...)
	router.AddSubscriberDecorators(seqwatermill.Decorator(append([]seqwatermill.Option{
		seqwatermill.WithKeyMetadata("key"), seqwatermill.WithLogger(watermill.NopLogger{})}, opts...)...))
	router.AddConsumerHandler("h", "topic", sub, h)
	ran := make(chan error, 1)
	go func() { ran <- router.Run(context.Background()) }()
	<-router.Running()
	t.Cleanup(func() {
		require.NoError(t, router.Close())
		require.NoError(t, <-ran)
	})
}

// The Retry middleware retries inside one hand-over; the decorator retries
// the hand-over: the counts multiply. Retry{MaxRetries: 2} (3 calls) under
// WithRetries(3) makes 9 calls before the subscriber's message is nacked.
func TestRetryMiddlewareMultipliesWithRetries(t *testing.T) {
	r := newReleasing(1)
	a1 := msg("a1", "a")
	r.in <- a1
	var calls atomic.Int32
	runRouter(t, r, func(*message.Message) error {
		calls.Add(1)
		return errors.New("down")
	}, []message.HandlerMiddleware{middleware.Retry{MaxRetries: 2}.Middleware}, seqwatermill.WithRetries(3, noBackoff))
	select {
	case <-a1.Nacked():
	case <-time.After(10 * time.Second):
		t.Fatal("a1 not nacked in 10s")
	}
	assert.Equal(t, int32(9), calls.Load(), "handler calls")
}

// The PoisonQueue middleware publishes a failed message to its topic and
// acks it: the decorator sees an Ack, so neither WithRetries nor
// WithHaltOnNack fires, and the key goes on.
func TestPoisonQueueAcksSoTheKeyNeverHalts(t *testing.T) {
	r := newReleasing(2)
	a1, a2 := msg("a1", "a"), msg("a2", "a")
	r.in <- a1
	r.in <- a2
	poison := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = poison.Close() })
	pq, err := middleware.PoisonQueue(poison, "poison")
	require.NoError(t, err)
	var ctl seqwatermill.Controller
	runRouter(t, r, func(m *message.Message) error {
		if m.UUID == "a1" {
			return errors.New("never succeeds")
		}
		return nil
	}, []message.HandlerMiddleware{pq}, seqwatermill.WithRetries(3, noBackoff), seqwatermill.WithHaltOnNack(),
		seqwatermill.WithController(&ctl))
	for _, m := range []*message.Message{a1, a2} {
		select {
		case <-m.Acked():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not acked in 10s", m.UUID)
		}
	}
	assert.Empty(t, ctl.Halted(), "halted keys")
}
