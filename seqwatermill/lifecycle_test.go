package seqwatermill_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqwatermill"
)

func TestMaxPerKeyPushesBackOnTheSubscriber(t *testing.T) {
	r := newReleasing(5)
	for _, m := range []*message.Message{msg("a1", "a"), msg("a2", "a"), msg("a3", "a"), msg("a4", "a"), msg("b1", "b")} {
		r.in <- m
	}
	_, out := subscribe(t, r, seqwatermill.WithMaxPerKey(2))
	// a3 waits for a1 to be done, a4 for a2, and b1, behind a4 at the
	// subscriber, for a4: b1 cannot come before a2 is done.
	var got []string
	for range 5 {
		m := next(t, out)
		got = append(got, m.UUID)
		m.Ack()
	}
	assert.Greater(t, slices.Index(got, "b1"), slices.Index(got, "a2"), "order received: %v", got)
}

func TestCloseLeavesQueuedMessagesUnackedForRedelivery(t *testing.T) {
	r := newReleasing(2)
	ctx, cancel := context.WithCancel(context.Background()) // ends when the subscriber closes, as gochannel's
	a1, a2 := msg("a1", "a"), msg("a2", "a")
	a1.SetContext(ctx)
	a2.SetContext(ctx)
	r.in <- a1
	r.in <- a2
	log := newRecorder()
	s, out := subscribe(t, r, seqwatermill.WithLogger(log))
	inHandler := next(t, out)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	cancel()
	select {
	case <-inHandler.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("handler's message ctx not done 10s after Close")
	}
	require.NoError(t, <-closed)
	_, ok := <-out
	assert.False(t, ok, "a2 sent after Close")
	assert.Equal(t, "", settled(a1))
	assert.Equal(t, "", settled(a2))
	assert.Empty(t, log.errors(), "Error records: a Close is no failure")
	_, err := s.Subscribe(context.Background(), "topic")
	assert.ErrorIs(t, err, seqwatermill.ErrClosed)
}

func TestAckOnReceiveAcksAtOnceAndCloseHandsOverTheQueued(t *testing.T) {
	r := newReleasing(2)
	a1, a2 := msg("a1", "a"), msg("a2", "a")
	r.in <- a1
	r.in <- a2
	s, out := subscribe(t, r, seqwatermill.WithAckOnReceive())
	first := next(t, out)
	select {
	case <-a2.Acked():
	case <-time.After(10 * time.Second):
		t.Fatal("a2 not acked on receipt")
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	first.Ack()
	second := next(t, out)
	assert.Equal(t, "a2", second.UUID)
	second.Ack()
	require.NoError(t, <-closed)
	_, ok := <-out
	assert.False(t, ok)
}

func TestCloseTimeoutGivesUpOnAnUnackedMessage(t *testing.T) {
	r := newReleasing(1)
	a1 := msg("a1", "a") // its ctx never ends: only the close timeout frees it
	r.in <- a1
	s, out := subscribe(t, r, seqwatermill.WithCloseTimeout(50*time.Millisecond))
	next(t, out) // never acked
	require.NoError(t, s.Close())
	_, ok := <-out
	assert.False(t, ok)
	assert.Equal(t, "", settled(a1))
}

func TestCloseLeavesAHaltedKeyUnackedAndDoesNotWaitForIt(t *testing.T) {
	r := newReleasing(2)
	log := newRecorder()
	a1, a2 := msg("a1", "a"), msg("a2", "a") // their ctx never ends
	r.in <- a1
	r.in <- a2
	s, out := subscribe(t, r, seqwatermill.WithRetries(1, nil), seqwatermill.WithHaltOnNack(),
		seqwatermill.WithCloseTimeout(20*time.Second), seqwatermill.WithLogger(log))
	next(t, out).Nack()
	require.Equal(t, "a", log.halted(t))
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting 10s later for a halted key (close timeout 20s)")
	}
	_, ok := <-out
	assert.False(t, ok, "a message of the halted key sent after Close")
	assert.Equal(t, "", settled(a1))
	assert.Equal(t, "", settled(a2))
	assert.False(t, s.Paused("a"), "Paused after Close")
	assert.ErrorIs(t, s.Resume("a"), seqwatermill.ErrClosed)
}

func TestAckOnReceiveDropsAHaltedKeyAtClose(t *testing.T) {
	r := newReleasing(2)
	log := newRecorder()
	a2 := msg("a2", "a")
	r.in <- msg("a1", "a")
	r.in <- a2
	s, out := subscribe(t, r, seqwatermill.WithRetries(1, nil), seqwatermill.WithHaltOnNack(),
		seqwatermill.WithAckOnReceive(), seqwatermill.WithCloseTimeout(20*time.Second), seqwatermill.WithLogger(log))
	next(t, out).Nack()
	require.Equal(t, "a", log.halted(t))
	<-a2.Acked() // taken: acked on receipt, and queued before Close can end the dispatch
	require.NoError(t, s.Close())
	_, ok := <-out
	assert.False(t, ok, "a message of the halted key handed to the handler at Close")
	assert.ElementsMatch(t, []string{
		"Key halted: its message was nacked on its last attempt; Resume the key to hand it to the handler again a1",
		"Acked message dropped: its key was halted at close a1",
		"Acked message dropped: its key was halted at close a2",
	}, log.errors())
}

// A Close that races the halt either finds the key halted and gives it up,
// or comes first, and the key does not halt: either way it returns at
// once and leaves the messages un-acked.
func TestCloseRacingAHaltReturnsPromptly(t *testing.T) {
	for range 20 {
		r := newReleasing(2)
		a1, a2 := msg("a1", "a"), msg("a2", "a")
		r.in <- a1
		r.in <- a2
		s, out := subscribe(t, r, seqwatermill.WithRetries(1, nil), seqwatermill.WithHaltOnNack(),
			seqwatermill.WithCloseTimeout(20*time.Second))
		first := next(t, out)
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		first.Nack()
		select {
		case err := <-closed:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Close still waiting 10s later (close timeout 20s)")
		}
		_, ok := <-out
		require.False(t, ok, "a message sent after Close")
		require.Equal(t, "", settled(a1), "a1 settled")
		require.Equal(t, "", settled(a2))
	}
}

func TestBadOptionsAreRefusedByName(t *testing.T) {
	key := seqwatermill.WithKeyMetadata("k")
	for _, tc := range []struct {
		opts []seqwatermill.Option
		want string
	}{
		{nil, "NewSubscriber: needs WithKeyMetadata or WithKeyFunc"},
		{[]seqwatermill.Option{seqwatermill.WithKeyMetadata("")}, `WithKeyMetadata(""): must not be empty`},
		{[]seqwatermill.Option{seqwatermill.WithKeyFunc(nil)}, "WithKeyFunc(nil): must not be nil"},
		{[]seqwatermill.Option{key, seqwatermill.WithKeyFunc(func(*message.Message) string { return "" })},
			`WithKeyFunc(fn): cannot be combined with WithKeyMetadata("k")`},
		{[]seqwatermill.Option{key, seqwatermill.WithMaxBuffered(0)}, "WithMaxBuffered(0): must be >= 1"},
		{[]seqwatermill.Option{key, seqwatermill.WithMaxPerKey(0)}, "WithMaxPerKey(0): must be >= 1"},
		{[]seqwatermill.Option{key, seqwatermill.WithMaxConcurrency(-1)}, "WithMaxConcurrency(-1): must be >= 0"},
		{[]seqwatermill.Option{key, seqwatermill.WithRetries(-1, nil)}, "WithRetries(-1, nil): attempts must be >= 0"},
		{[]seqwatermill.Option{key, seqwatermill.WithCloseTimeout(0)}, "WithCloseTimeout(0s): must be > 0"},
		{[]seqwatermill.Option{key, seqwatermill.WithPriorityMetadata("")}, `WithPriorityMetadata(""): must not be empty`},
		{[]seqwatermill.Option{key, seqwatermill.WithLogger(nil)}, "WithLogger(nil): must not be nil"},
		{[]seqwatermill.Option{key, nil}, "option 1: must not be nil"},
		{[]seqwatermill.Option{key, seqwatermill.WithHaltOnNack()}, "WithHaltOnNack(): needs WithRetries with attempts >= 1"},
		{[]seqwatermill.Option{key, seqwatermill.WithController(nil)}, "WithController(nil): must not be nil"},
		{[]seqwatermill.Option{key, seqwatermill.WithInterceptor(nil)}, "WithInterceptor(nil): must not be nil"},
		{[]seqwatermill.Option{key, seqwatermill.WithSubscriberAckTimeout(0)}, "WithSubscriberAckTimeout(0s): must be > 0"},
		// DefaultBackoff waits 1.6s after the fifth attempt: watermill-nats
		// with AckWaitTimeout 1s gives the message up during that wait.
		{[]seqwatermill.Option{key, seqwatermill.WithRetries(10, nil), seqwatermill.WithSubscriberAckTimeout(time.Second)},
			"WithSubscriberAckTimeout(1s): DefaultBackoff waits 1.6s after attempt 5"},
		{[]seqwatermill.Option{key, seqwatermill.WithSubscriberAckTimeout(5 * time.Second)},
			"WithSubscriberAckTimeout(5s): DefaultBackoff waits 6.4s after attempt 7"},
	} {
		_, err := seqwatermill.NewSubscriber(newReleasing(0), tc.opts...)
		require.Error(t, err, "%v", tc.opts)
		assert.True(t, errors.Is(err, seqwatermill.ErrInvalidOption), "%v", err)
		assert.Contains(t, err.Error(), tc.want)
		var oe *seqwatermill.OptionError
		if assert.ErrorAs(t, err, &oe) {
			assert.Contains(t, tc.want, oe.Option, "OptionError.Option")
		}
	}
	// Retries whose backoffs all fit inside the subscriber's timer pass.
	_, err := seqwatermill.NewSubscriber(newReleasing(0), key, seqwatermill.WithRetries(4, nil),
		seqwatermill.WithSubscriberAckTimeout(time.Second))
	assert.NoError(t, err, "backoffs 100ms..400ms under a 1s ack timeout")
}

// waiting is a subscriber whose Subscribe waits until Close, as one that
// waits for a connection or a stream does.
type waiting struct {
	entered, closed chan struct{}
}

func (w waiting) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	close(w.entered)
	<-w.closed
	return nil, errors.New("closed")
}

func (w waiting) Close() error { close(w.closed); return nil }

func TestCloseEndsAWrappedSubscribeThatWaits(t *testing.T) {
	w := waiting{make(chan struct{}), make(chan struct{})}
	s, err := seqwatermill.NewSubscriber(w, seqwatermill.WithKeyMetadata("key"))
	require.NoError(t, err)
	subscribed := make(chan error, 1)
	go func() {
		_, err := s.Subscribe(context.Background(), "topic")
		subscribed <- err
	}()
	<-w.entered
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting 10s later for the wrapped Subscribe")
	}
	assert.Error(t, <-subscribed)
}

// With WithAckOnReceive the subscriber's message was acked, and its ctx may
// be over; the handler's ctx still ends when the Router closes, as a
// subscriber's Close ends it, so a handler that waits on it returns at
// once instead of holding Close for the whole close timeout.
func TestAckOnReceiveRouterCloseCancelsTheHandlersCtx(t *testing.T) {
	bus := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 20 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddSubscriberDecorators(seqwatermill.Decorator(seqwatermill.WithKeyMetadata("key"),
		seqwatermill.WithAckOnReceive(), seqwatermill.WithCloseTimeout(20*time.Second),
		seqwatermill.WithLogger(watermill.NopLogger{})))
	inHandler := make(chan struct{})
	router.AddConsumerHandler("h", "events", bus, func(m *message.Message) error {
		close(inHandler)
		<-m.Context().Done()
		return m.Context().Err()
	})
	ran := make(chan error, 1)
	go func() { ran <- router.Run(context.Background()) }()
	<-router.Running()
	require.NoError(t, bus.Publish("events", msg("a1", "a")))
	<-inHandler
	closed := make(chan error, 1)
	go func() { closed <- router.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Router.Close still waiting 10s later: the handler's ctx was not canceled (close timeouts 20s)")
	}
	require.NoError(t, <-ran)
	require.NoError(t, bus.Close())
}

// With WithAckOnReceive a message given up at Close is lost: its record
// names it by its UUID, not only by its key.
func TestAckOnReceiveLostMessagesAreLoggedWithTheirUUID(t *testing.T) {
	r := newReleasing(2)
	log := newRecorder()
	a2 := msg("a2", "a")
	r.in <- msg("a1", "a")
	r.in <- a2
	s, out := subscribe(t, r, seqwatermill.WithAckOnReceive(), seqwatermill.WithCloseTimeout(50*time.Millisecond),
		seqwatermill.WithLogger(log))
	require.Equal(t, "a1", next(t, out).UUID) // never acked
	<-a2.Acked()                              // taken, and queued before Close can end the dispatch
	require.NoError(t, s.Close())
	assert.ElementsMatch(t, []string{
		"Close timeout: gave up on messages in the handler <nil>",
		"Acked message dropped: not settled before the close timeout a1",
		"Acked message dropped: never handed over before the close timeout a2",
	}, log.errors())
}
