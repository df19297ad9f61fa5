package seqwatermill_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqwatermill"
)

// The guarantee: a key's message reaches the handler only after every
// earlier one of its key was handled, whatever the subscriber does with
// its timers. watermill-nats gives a message up AckWaitTimeout after
// sending it (it cancels the message's ctx and sends the next) and
// JetStream redelivers it after the consumer's AckWait; these tests run
// both timers short, against an embedded nats-server, with handlers and
// retries longer than them.

// natsRig is a Router whose handler's subscriber is watermill-nats'
// JetStream one, decorated, on an embedded nats-server.
type natsRig struct {
	pub      message.Publisher
	timeouts chan string // UUIDs watermill-nats gave up ("Ack timeout")
	mu       sync.Mutex
	in       map[string]int      // messages of each key in the handler now
	overlap  []string            // keys found twice in the handler at once
	handled  map[string][]string // payloads handled, per key, in order of return
	close    func()              // closes the Router, once
	consumer jetstream.Consumer  // the JetStream consumer, once subscribed
	sub      *seqwatermill.Subscriber
}

// startNATSRouter starts the rig: watermill-nats with ackTimeout
// (AckWaitTimeout), a consumer with AckWait ackWait, the decorator with
// opts, and handle as the handler (under the rig's bookkeeping). The
// Router is closed at the end of the test.
func startNATSRouter(t *testing.T, ackTimeout, ackWait time.Duration, handle func(*message.Message) error, opts ...seqwatermill.Option) *natsRig {
	t.Helper()
	url := startNATS(t)
	rig := &natsRig{timeouts: make(chan string, 1000), in: map[string]int{}, handled: map[string][]string{}}
	pub, err := wmjs.NewPublisher(wmjs.PublisherConfig{URL: url, Logger: watermill.NopLogger{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	rig.pub = pub
	sub, err := wmjs.NewSubscriber(wmjs.SubscriberConfig{
		Conn: connect(t, url), Logger: natsTrace{rig.timeouts}, AckWaitTimeout: ackTimeout,
		ResourceInitializer: consumerWithAckWait(ackWait, &rig.consumer),
	})
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 20 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	decorated, err := seqwatermill.NewSubscriber(sub, append([]seqwatermill.Option{
		seqwatermill.WithKeyMetadata("key"), seqwatermill.WithLogger(watermill.NopLogger{})}, opts...)...)
	require.NoError(t, err)
	rig.sub = decorated
	router.AddConsumerHandler("h", "events", decorated, func(m *message.Message) error {
		key := m.Metadata.Get("key")
		rig.mu.Lock()
		if rig.in[key]++; rig.in[key] > 1 {
			rig.overlap = append(rig.overlap, key)
		}
		rig.mu.Unlock()
		err := handle(m)
		rig.mu.Lock()
		rig.in[key]--
		if err == nil {
			rig.handled[key] = append(rig.handled[key], string(m.Payload))
		}
		rig.mu.Unlock()
		return err
	})
	ran := make(chan error, 1)
	go func() { ran <- router.Run(context.Background()) }()
	<-router.Running()
	var once sync.Once
	rig.close = func() {
		once.Do(func() {
			require.NoError(t, router.Close())
			require.NoError(t, <-ran)
		})
	}
	t.Cleanup(rig.close)
	return rig
}

// waitAcked waits until JetStream has every message acked and every
// delivery reached the decorator, so that no redelivery is on its way
// when the Router closes: watermill-nats closes its channel while it may
// be sending on it. It fails the test after 20s.
func (r *natsRig) waitAcked(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := r.consumer.Info(context.Background())
		require.NoError(t, err)
		// Every delivery the server made has reached the decorator: none
		// waits in nats.go's buffer or in watermill-nats' send.
		if info.NumAckPending == 0 && info.NumPending == 0 && r.sub.Stats().Received == info.Delivered.Consumer {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream: %d messages un-acked, %d pending after 20s", info.NumAckPending, info.NumPending)
		}
		select {
		case <-r.timeouts:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// final closes the Router and returns what each key had handled by then.
func (r *natsRig) final() map[string][]string {
	r.close()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handled
}

// publish publishes one message of key per payload, in order.
func (r *natsRig) publish(t *testing.T, key string, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		m := message.NewMessage(watermill.NewUUID(), []byte(p))
		m.Metadata.Set("key", key)
		require.NoError(t, r.pub.Publish("events", m))
	}
}

// waitHandled waits until key's handled payloads number n, and returns
// them, failing the test after 20s.
func (r *natsRig) waitHandled(t *testing.T, key string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r.mu.Lock()
		got := append([]string(nil), r.handled[key]...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s: handled %v after 20s; want %d messages", key, got, n)
		}
		select {
		case <-r.timeouts: // progress of the subscriber's timers
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// gaveUp waits until watermill-nats gave a message up (its "Ack timeout"
// trace), failing the test after 10s.
func (r *natsRig) gaveUp(t *testing.T) {
	t.Helper()
	select {
	case <-r.timeouts:
	case <-time.After(10 * time.Second):
		t.Fatal("watermill-nats gave no message up in 10s")
	}
}

func (r *natsRig) overlaps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.overlap...)
}

// natsTrace is watermill-nats' logger: it sends the ID of each message it
// gives up on timeouts.
type natsTrace struct{ timeouts chan string }

func (natsTrace) Error(string, error, watermill.LogFields) {}
func (natsTrace) Info(string, watermill.LogFields)         {}
func (natsTrace) Debug(string, watermill.LogFields)        {}
func (n natsTrace) Trace(msg string, f watermill.LogFields) {
	if msg == "Ack timeout" {
		select {
		case n.timeouts <- fmt.Sprint(f["ID"]):
		default:
		}
	}
}
func (n natsTrace) With(watermill.LogFields) watermill.LoggerAdapter { return n }

// consumerWithAckWait makes the topic's stream and a consumer whose
// AckWait (JetStream's redelivery timer) is ackWait: watermill-nats' own
// initializers leave it at the server's 30s.
func consumerWithAckWait(ackWait time.Duration, made *jetstream.Consumer) wmjs.ResourceInitializer {
	return func(ctx context.Context, js jetstream.JetStream, topic string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
		s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: topic, Subjects: []string{topic}})
		if err != nil {
			return nil, nil, err
		}
		c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Name: "watermill__" + topic, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
		*made = c
		return c, nil, err
	}
}

// A database restarting: the handler fails for longer than the
// subscriber's AckWaitTimeout. The key's next message waits for the
// failing one, which is retried until it succeeds.
func TestRetryLongerThanTheAckTimeoutKeepsTheKeysOrder(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	var failing sync.Once
	failed := make(chan struct{})
	log := newRecorder()
	rig := startNATSRouter(t, 300*time.Millisecond, time.Second, func(m *message.Message) error {
		if string(m.Payload) == "1" && down.Load() {
			failing.Do(func() { close(failed) })
			return errors.New("database restarting")
		}
		return nil
	}, seqwatermill.WithRetries(0, nil), seqwatermill.WithLogger(log))
	rig.publish(t, "a", "1", "2")
	<-failed
	rig.gaveUp(t) // message 1, while it is retried
	rig.gaveUp(t) // message 2, queued behind it
	down.Store(false)
	rig.waitHandled(t, "a", 2)
	rig.waitAcked(t)
	assert.Equal(t, []string{"1", "2"}, rig.final()["a"], "order of key a, each once")
	assert.Empty(t, rig.overlaps(), "keys with two messages in the handler at once")
	assert.True(t, slices.ContainsFunc(log.errors(), func(e string) bool {
		return strings.HasPrefix(e, "Message given up by the subscriber before it was settled")
	}), "the give-up logged at Error: %q", log.errors())
	assert.True(t, log.loggedError(seqwatermill.ErrGivenUp), "an Error record with ErrGivenUp")
	assert.GreaterOrEqual(t, rig.sub.Stats().GivenUp, uint64(1), "Stats.GivenUp")
}

// A handler slower than the subscriber's AckWaitTimeout keeps its key to
// itself: the key's next message, which the subscriber sends once it gave
// the first up, waits until the handler returned.
func TestHandlerSlowerThanTheAckTimeoutHasItsKeyAlone(t *testing.T) {
	second := make(chan struct{})
	var once sync.Once
	rig := startNATSRouter(t, 300*time.Millisecond, time.Second, func(m *message.Message) error {
		switch string(m.Payload) {
		case "1":
			<-m.Context().Done() // the subscriber gave it up
			select {             // a second message of the key would arrive now
			case <-second:
			case <-time.After(time.Second):
			}
		case "2":
			once.Do(func() { close(second) })
		}
		return nil
	})
	rig.publish(t, "a", "1", "2")
	rig.waitHandled(t, "a", 2)
	assert.Empty(t, rig.overlaps(), "keys with two messages in the handler at once")
	rig.waitAcked(t)
	assert.Equal(t, []string{"1", "2"}, rig.final()["a"], "order of key a, each once")
}

// Keys halted, then resumed after the subscriber gave their messages up
// (and the broker redelivered them): each key's messages are handled in
// order: each only after every earlier one of its key. A message may be
// handled twice when the broker redelivered it while its first delivery
// waited in nats.go's buffer (the halts stall watermill-nats past the
// consumer's AckWait): at least once.
func TestResumeAfterTheAckTimeoutKeepsOrderAndHandlesEachOnce(t *testing.T) {
	const keys = 4
	rig, ctl, log, fix := startHaltingRouter(t, 700*time.Millisecond)
	for k := range keys {
		rig.publish(t, fmt.Sprint("k", k), "1", "2")
	}
	for range keys {
		log.halted(t)
	}
	for range 2 * keys { // every message given up, some redelivered
		rig.gaveUp(t)
	}
	fix()
	for k := range keys {
		require.NoError(t, ctl.Resume(fmt.Sprint("k", k)))
	}
	for k := range keys {
		rig.waitHandled(t, fmt.Sprint("k", k), 2)
	}
	rig.waitAcked(t)
	final := rig.final()
	for k := range keys {
		key := fmt.Sprint("k", k)
		assert.Empty(t, orderViolation(final[key], []string{"1", "2"}), "key %s handled %v", key, final[key])
	}
	assert.Empty(t, rig.overlaps(), "keys with two messages in the handler at once")
}

// Resume after the subscriber gave the held message up hands it to the
// handler at once, not after the broker's redelivery (AckWait 30s here).
func TestResumeAfterTheAckTimeoutHandsTheHeldMessageOverAtOnce(t *testing.T) {
	rig, ctl, log, fix := startHaltingRouter(t, 30*time.Second)
	rig.publish(t, "a", "1", "2")
	require.Equal(t, "a", log.halted(t))
	rig.gaveUp(t) // message 1, held
	rig.gaveUp(t) // message 2, queued behind it
	fix()
	resumed := time.Now()
	require.NoError(t, ctl.Resume("a"))
	rig.waitHandled(t, "a", 2)
	assert.Less(t, time.Since(resumed), 10*time.Second, "Resume to both handled; the broker redelivers after 30s")
	assert.Equal(t, []string{"1", "2"}, rig.final()["a"], "order of key a, each once")
}

// A message the subscriber gave up while its copy was in the handler, and
// sent again: the handler's Ack goes to the redelivery (whether it came
// before the Ack or after), the message is not handed over a second time,
// and the key goes on.
func TestTheHandlersAckReachesTheRedeliveryOfAMessageGivenUp(t *testing.T) {
	r := newReleasing(3)
	ctx, giveUp := context.WithCancel(context.Background())
	a1, a2 := msg("a1", "a"), msg("a2", "a")
	a1.SetContext(ctx)
	r.in <- a1
	r.in <- a2
	s, out := subscribe(t, r)
	first := next(t, out)
	require.Equal(t, "a1", first.UUID)
	giveUp() // as watermill-nats after AckWaitTimeout
	<-first.Context().Done()
	again := msg("a1", "a") // the broker's redelivery: same UUID, a live ctx
	r.in <- again
	first.Ack() // the handler finished after all
	select {
	case <-again.Acked():
	case <-time.After(10 * time.Second):
		t.Fatal("the redelivery not acked in 10s")
	}
	m := next(t, out)
	assert.Equal(t, "a2", m.UUID, "the next message handed over; a1 must not come again")
	m.Ack()
	require.NoError(t, s.Close())
	assert.Equal(t, "", settled(a1), "the copy given up: its Ack would be lost")
	st := s.Stats()
	assert.Equal(t, uint64(1), st.Redelivered+st.Duplicates, "the redelivery took a1's place, or was acked as a duplicate")
}

// A message the subscriber gave up while it waited (behind its key, for a
// retry, or halted) is handed over again with a live ctx, never the dead
// one, and never skipped: the key waits for it.
func TestAMessageGivenUpWhileItWaitsIsHandedOverWithALiveCtx(t *testing.T) {
	live := func(t *testing.T, m *message.Message, id string) {
		t.Helper()
		require.Equal(t, id, m.UUID)
		assert.NoError(t, m.Context().Err(), "the ctx of %s as handed over", id)
	}
	t.Run("behind its key", func(t *testing.T) {
		r := newReleasing(2)
		ctx, giveUp := context.WithCancel(context.Background())
		a1, a2 := msg("a1", "a"), msg("a2", "a")
		a2.SetContext(ctx)
		r.in <- a1
		r.in <- a2
		_, out := subscribe(t, r)
		first := next(t, out)
		live(t, first, "a1")
		giveUp() // a2, queued behind a1
		first.Ack()
		m := next(t, out)
		live(t, m, "a2")
		m.Ack()
	})
	t.Run("waiting for a retry", func(t *testing.T) {
		r := newReleasing(1)
		ctx, giveUp := context.WithCancel(context.Background())
		a1 := msg("a1", "a")
		a1.SetContext(ctx)
		r.in <- a1
		_, out := subscribe(t, r, seqwatermill.WithRetries(0, func(context.Context, *message.Message, int, error) time.Duration {
			giveUp() // while a1 waits for its retry
			return 0
		}))
		next(t, out).Nack()
		m := next(t, out)
		live(t, m, "a1")
		m.Ack()
	})
	t.Run("halted", func(t *testing.T) {
		r := newReleasing(1)
		ctx, giveUp := context.WithCancel(context.Background())
		a1 := msg("a1", "a")
		a1.SetContext(ctx)
		r.in <- a1
		log := newRecorder()
		s, out := subscribe(t, r, seqwatermill.WithRetries(1, nil), seqwatermill.WithHaltOnNack(), seqwatermill.WithLogger(log))
		next(t, out).Nack()
		require.Equal(t, "a", log.halted(t))
		giveUp()
		require.NoError(t, s.Resume("a"))
		m := next(t, out)
		live(t, m, "a1")
		m.Ack()
	})
}

// startHaltingRouter starts a router on JetStream (the subscriber's ack
// timeout 200ms, the consumer's AckWait ackWait) whose handler fails every
// message "1" until fix is called; with one retry and WithHaltOnNack, a
// key's message "1" halts the key.
func startHaltingRouter(t *testing.T, ackWait time.Duration) (rig *natsRig, ctl *seqwatermill.Controller, log recorder, fix func()) {
	t.Helper()
	var fixed atomic.Bool
	ctl = new(seqwatermill.Controller)
	log = newRecorder()
	rig = startNATSRouter(t, 200*time.Millisecond, ackWait, func(m *message.Message) error {
		if string(m.Payload) == "1" && !fixed.Load() {
			return errors.New("not yet")
		}
		return nil
	}, seqwatermill.WithRetries(1, nil), seqwatermill.WithHaltOnNack(), seqwatermill.WithController(ctl),
		seqwatermill.WithLogger(log))
	return rig, ctl, log, func() { fixed.Store(true) }
}
