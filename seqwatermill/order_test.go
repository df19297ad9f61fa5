package seqwatermill_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqwatermill"
)

func TestNextOfKeyWaitsForAckOtherKeysDoNot(t *testing.T) {
	r := newReleasing(3)
	a1, a2, b1 := msg("a1", "a"), msg("a2", "a"), msg("b1", "b")
	r.in <- a1
	r.in <- a2
	r.in <- b1
	_, out := subscribe(t, r)
	// a2 cannot be sent before a1 is acked; b1 can: the first two are a1, b1.
	first, second := next(t, out), next(t, out)
	assert.ElementsMatch(t, []string{"a1", "b1"}, []string{first.UUID, second.UUID})
	assert.Equal(t, "", settled(a1), "a1 settled before its handler acked")
	for _, m := range []*message.Message{first, second} {
		m.Ack()
	}
	third := next(t, out)
	assert.Equal(t, "a2", third.UUID)
	assert.Equal(t, "ack", settled(a1))
	third.Ack()
}

func TestAckReachesTheSubscriberOnlyAfterTheHandler(t *testing.T) {
	r := newReleasing(1)
	a1 := msg("a1", "a")
	r.in <- a1
	_, out := subscribe(t, r)
	got := next(t, out)
	assert.Equal(t, "", settled(a1))
	got.Ack()
	select {
	case <-a1.Acked():
	case <-time.After(10 * time.Second):
		t.Fatal("subscriber's message not acked 10s after the handler's Ack")
	}
	select {
	case <-got.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("handler's message ctx not done after its Ack")
	}
}

func TestNackRetriesInPlaceAndTheKeyWaits(t *testing.T) {
	r := newReleasing(2)
	a1, a2 := msg("a1", "a"), msg("a2", "a")
	r.in <- a1
	r.in <- a2
	_, out := subscribe(t, r, seqwatermill.WithRetries(0, noBackoff))
	for range 3 {
		m := next(t, out)
		require.Equal(t, "a1", m.UUID, "a later message of the key overtook a nacked one")
		m.Nack()
	}
	next(t, out).Ack() // a1's fourth attempt
	m := next(t, out)
	assert.Equal(t, "a2", m.UUID)
	assert.Equal(t, "ack", settled(a1), "the subscriber's message is acked, never nacked")
	m.Ack()
}

func TestLastAttemptNacksToTheSubscriberAndTheKeyGoesOn(t *testing.T) {
	r := newReleasing(2)
	a1, a2 := msg("a1", "a"), msg("a2", "a")
	r.in <- a1
	r.in <- a2
	_, out := subscribe(t, r, seqwatermill.WithRetries(2, noBackoff))
	next(t, out).Nack()
	next(t, out).Nack()
	m := next(t, out)
	assert.Equal(t, "a2", m.UUID)
	assert.Equal(t, "nack", settled(a1))
	m.Ack()
}

func TestHaltOnNackHoldsTheKeyUntilResume(t *testing.T) {
	r := &releasing{in: make(chan *message.Message)} // unbuffered: a send returns once taken
	log := newRecorder()
	s, out := subscribe(t, r, seqwatermill.WithRetries(1, nil), seqwatermill.WithHaltOnNack(), seqwatermill.WithLogger(log))
	a1, a2, b1, b2 := msg("a1", "a"), msg("a2", "a"), msg("b1", "b"), msg("b2", "b")
	r.in <- a1
	first := next(t, out)
	require.Equal(t, "a1", first.UUID)
	r.in <- a2
	r.in <- b1
	first.Nack() // the last of 1 attempt
	assert.Equal(t, "a", log.halted(t))
	assert.True(t, s.Paused("a"), "Paused(a) after the halt")
	assert.False(t, s.Paused("b"), "Paused(b)")
	assert.Equal(t, "", settled(a1), "a halted message is neither acked nor nacked")

	// The other keys go on; a's later messages wait.
	for _, want := range []string{"b1", "b2"} {
		if want == "b2" {
			r.in <- b2
		}
		m := next(t, out)
		require.Equal(t, want, m.UUID, "a message of the halted key was sent")
		m.Ack()
	}

	require.NoError(t, s.Resume("a"))
	assert.False(t, s.Paused("a"), "Paused(a) after Resume")
	again := next(t, out)
	require.Equal(t, "a1", again.UUID, "the halted message comes first on Resume")
	assert.NotSame(t, first, again, "a fresh copy")
	again.Ack()
	m := next(t, out)
	assert.Equal(t, "a2", m.UUID)
	assert.Equal(t, "ack", settled(a1), "the subscriber's message is acked, never nacked")
	m.Ack()
	require.NoError(t, s.Resume("a"), "Resume of a key not halted")
}

func TestHaltedMessageGoesBeforeAHighQueuedBehindIt(t *testing.T) {
	r := &releasing{in: make(chan *message.Message)}
	log := newRecorder()
	s, out := subscribe(t, r, seqwatermill.WithRetries(1, nil), seqwatermill.WithHaltOnNack(),
		seqwatermill.WithPriorityMetadata("priority"), seqwatermill.WithLogger(log))
	a1, a2 := msg("a1", "a"), msg("a2", "a")
	a2.Metadata.Set("priority", "high") // queued in the High lane while a1 is in the handler
	r.in <- a1
	first := next(t, out)
	r.in <- a2
	r.in <- msg("b1", "b") // taken only once a2 was queued
	first.Nack()
	require.Equal(t, "a", log.halted(t))
	next(t, out).Ack() // b1
	require.NoError(t, s.Resume("a"))
	var got []string
	for range 2 {
		m := next(t, out)
		got = append(got, m.UUID)
		m.Ack()
	}
	assert.Equal(t, []string{"a1", "a2"}, got, "order of key a after Resume")
}

func TestHaltedKeyHaltsAgainWhenItsMessageFailsAfterResume(t *testing.T) {
	r := newReleasing(2)
	log := newRecorder()
	a1, a2 := msg("a1", "a"), msg("a2", "a")
	r.in <- a1
	r.in <- a2
	s, out := subscribe(t, r, seqwatermill.WithRetries(2, noBackoff), seqwatermill.WithHaltOnNack(), seqwatermill.WithLogger(log))
	for round := range 2 {
		for attempt := range 2 {
			m := next(t, out)
			require.Equal(t, "a1", m.UUID, "round %d, attempt %d", round, attempt)
			m.Nack()
		}
		require.Equal(t, "a", log.halted(t))
		require.True(t, s.Paused("a"))
		require.NoError(t, s.Resume("a"))
	}
	next(t, out).Ack() // a1, at last
	m := next(t, out)
	assert.Equal(t, "a2", m.UUID)
	assert.Equal(t, "ack", settled(a1))
	m.Ack()
}

// TestControllerResumesAKeyHaltedUnderARouter halts a key of a Router's
// handler, which the Router's user reaches only through the Controller.
func TestControllerResumesAKeyHaltedUnderARouter(t *testing.T) {
	sub := newReleasing(3)
	for _, m := range []*message.Message{msg("a1", "a"), msg("a2", "a"), msg("b1", "b")} {
		sub.in <- m
	}
	var ctl seqwatermill.Controller
	log := newRecorder()
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddSubscriberDecorators(seqwatermill.Decorator(seqwatermill.WithKeyMetadata("key"),
		seqwatermill.WithRetries(1, nil), seqwatermill.WithHaltOnNack(), seqwatermill.WithController(&ctl),
		seqwatermill.WithLogger(log)))
	// The Router closes its subscribers on goroutines of its own, and its
	// Close can return before theirs: closed tells when the decorated one's
	// Close returned.
	closed := make(chan struct{})
	var once sync.Once
	router.AddSubscriberDecorators(func(s message.Subscriber) (message.Subscriber, error) {
		return closeSignal{s, func() { once.Do(func() { close(closed) }) }}, nil
	})
	handled := make(chan string, 4)
	var fixed atomic.Bool
	router.AddConsumerHandler("h", "topic", sub, func(m *message.Message) error {
		if m.UUID == "a1" && !fixed.Load() {
			return errors.New("a1 cannot be handled yet")
		}
		handled <- m.UUID
		return nil
	})
	ran := make(chan error, 1)
	go func() { ran <- router.Run(context.Background()) }()
	<-router.Running()

	require.Equal(t, "a", log.halted(t))
	assert.True(t, ctl.Paused("a"), "Paused(a) through the Controller")
	assert.Equal(t, "b1", recv(t, handled))
	fixed.Store(true)
	require.NoError(t, ctl.Resume("a"))
	assert.Equal(t, []string{"a1", "a2"}, []string{recv(t, handled), recv(t, handled)})

	require.NoError(t, router.Close())
	require.NoError(t, <-ran)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the Router did not close its subscriber in 10s")
	}
	assert.ErrorIs(t, ctl.Resume("a"), seqwatermill.ErrClosed, "Resume after the Router closed its subscriber")
}

// closeSignal is a subscriber decorator that calls closed once the
// subscriber it wraps returned from Close.
type closeSignal struct {
	message.Subscriber
	closed func()
}

func (c closeSignal) Close() error {
	defer c.closed()
	return c.Subscriber.Close()
}

func recv(t *testing.T, c <-chan string) string {
	t.Helper()
	select {
	case s := <-c:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("nothing in 10s")
		return ""
	}
}

func TestHighOvertakesTheQueuedOfItsKey(t *testing.T) {
	r := &releasing{in: make(chan *message.Message)} // unbuffered: a send returns once taken
	_, out := subscribe(t, r, seqwatermill.WithPriorityMetadata("priority"))
	a1, a2, a3 := msg("a1", "a"), msg("a2", "a"), msg("a3", "a")
	a3.Metadata.Set("priority", "High")
	r.in <- a1
	first := next(t, out)
	r.in <- a2
	r.in <- a3
	r.in <- msg("b1", "b") // taken only once a3 was queued
	got := []string{first.UUID}
	first.Ack()
	for range 3 {
		m := next(t, out)
		got = append(got, m.UUID)
		m.Ack()
	}
	assert.Equal(t, []string{"a3", "a2"}, without(got, "a1", "b1"))
}

func without(ids []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(drop, id) })
}

// TestRouterKeepsOrderPerKeyOnGoChannel runs watermill's Router with the
// decorator on gochannel: 1,000 messages over 16 keys, order per key
// asserted, and two keys in the handler at once. gochannel keeps order
// only when Publish waits for the Ack (BlockPublishUntilSubscriberAck), so
// WithAckOnReceive lets the next message through.
func TestRouterKeepsOrderPerKeyOnGoChannel(t *testing.T) {
	const n, keys = 1000, 16
	bus := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddSubscriberDecorators(seqwatermill.Decorator(seqwatermill.WithKeyMetadata("key"),
		seqwatermill.WithAckOnReceive(), seqwatermill.WithLogger(watermill.NopLogger{})))

	var mu sync.Mutex
	seen := map[string][]int{}
	both := make(chan struct{}) // closed when key 1's first message is in the handler
	done := make(chan struct{})
	router.AddConsumerHandler("h", "events", bus, func(m *message.Message) error {
		var i int
		fmt.Sscan(string(m.Payload), &i)
		key := m.Metadata.Get("key")
		if i == 1 {
			close(both)
		}
		if i == 0 { // key 0's first message waits for key 1's: two keys at once
			select {
			case <-both:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("key 1 never ran while key 0 was in the handler")
			}
		}
		mu.Lock()
		defer mu.Unlock()
		seen[key] = append(seen[key], i)
		if i == n-1 {
			close(done)
		}
		return nil
	})
	ran := make(chan error, 1)
	go func() { ran <- router.Run(context.Background()) }()
	<-router.Running()
	for i := range n {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))
		m.Metadata.Set("key", fmt.Sprint(i%keys))
		require.NoError(t, bus.Publish("events", m))
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("not all messages handled in 30s")
	}
	require.NoError(t, router.Close())
	require.NoError(t, <-ran)
	require.NoError(t, bus.Close())
	mu.Lock()
	defer mu.Unlock()
	for k := range keys {
		var want []int
		for i := k; i < n; i += keys {
			want = append(want, i)
		}
		assert.Equal(t, want, seen[fmt.Sprint(k)], "order of key %d", k)
	}
}
