package seqwatermill_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/seqsched/seqsched/seqwatermill"
)

// releasing is a subscriber that sends its messages in order without
// waiting for their Acks, as a broker with an ack window does. The test
// feeds in; Close closes it.
type releasing struct {
	in   chan *message.Message
	once sync.Once
}

func newReleasing(buffer int) *releasing {
	return &releasing{in: make(chan *message.Message, buffer)}
}

func (r *releasing) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	return r.in, nil
}

func (r *releasing) Close() error {
	r.once.Do(func() { close(r.in) })
	return nil
}

// msg returns a message of key (metadata "key") whose UUID is id.
func msg(id, key string) *message.Message {
	m := message.NewMessage(id, nil)
	m.Metadata.Set("key", key)
	return m
}

// subscribe wraps r with opts (keyed by metadata "key") and subscribes;
// the Subscriber is closed at the end of the test.
func subscribe(t *testing.T, r *releasing, opts ...seqwatermill.Option) (*seqwatermill.Subscriber, <-chan *message.Message) {
	t.Helper()
	s, err := seqwatermill.NewSubscriber(r, append([]seqwatermill.Option{seqwatermill.WithKeyMetadata("key"),
		seqwatermill.WithLogger(watermill.NopLogger{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	out, err := s.Subscribe(context.Background(), "topic")
	if err != nil {
		t.Fatal(err)
	}
	return s, out
}

// next receives a message from out, failing the test after 10s.
func next(t *testing.T, out <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-out:
		if !ok {
			t.Fatal("channel closed; want a message")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message in 10s")
		return nil
	}
}

// settled reports how m was settled: "ack", "nack" or "" (not yet).
func settled(m *message.Message) string {
	select {
	case <-m.Acked():
		return "ack"
	case <-m.Nacked():
		return "nack"
	default:
		return ""
	}
}

// noBackoff retries a nacked message at once.
func noBackoff(int) time.Duration { return 0 }
