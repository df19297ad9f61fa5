package seqwatermill

import (
	"context"
	"errors"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Decorator returns a watermill SubscriberDecorator that wraps each
// handler's subscriber with [NewSubscriber] and opts: the one line that
// turns a Router's handlers into key-ordered parallel ones.
//
//	router.AddSubscriberDecorators(seqwatermill.Decorator(seqwatermill.WithKeyMetadata("account")))
//
// A bad or missing option makes the Router's Run return the error (wrapping
// [ErrInvalidOption]).
func Decorator(opts ...Option) message.SubscriberDecorator {
	return func(sub message.Subscriber) (message.Subscriber, error) {
		return NewSubscriber(sub, opts...)
	}
}

// A Subscriber wraps a watermill Subscriber so that, of the messages it
// sends, those of one key reach the consumer one at a time and in order,
// and those of different keys at once:
//
//   - The key is the message's metadata field or a [KeyFunc]'s result.
//     A message of a key is sent on only after the previous one of its key
//     was acked (a High message, see WithPriorityMetadata, goes before the
//     queued ones of its key), whatever the wrapped subscriber does
//     meanwhile: a message it gives up before the Ack (see [ErrGivenUp])
//     still holds its key until the handler acked it.
//   - The subscriber's message is acked once the consumer (the Router's
//     handler) acked the copy sent on, and not before (unless
//     WithAckOnReceive): delivery stays at least once.
//   - A Nack is retried in place with a fresh copy after a backoff, the
//     key's later messages waiting (see WithRetries); after the last
//     attempt the key goes on, or, with WithHaltOnNack, halts until
//     [Subscriber.Resume].
//   - At most WithMaxBuffered messages are held (WithMaxPerKey per key);
//     at the bound the Subscriber stops taking messages from the wrapped
//     one, which pushes back on it.
//
// The parallelism comes from the wrapped subscriber: a subscriber that
// sends the next message only after the previous one was acked gives one
// message at a time, with or without this package; see the README's table,
// and WithAckOnReceive.
//
// A Subscriber is safe for concurrent use. Each Subscribe starts one
// goroutine, which Close (or the end of Subscribe's ctx) ends and waits for.
type Subscriber struct {
	sub  message.Subscriber
	opts options

	mu      sync.Mutex
	closed  bool
	closing chan struct{}              // closed by Close: every subscription ends
	subs    map[*subscription]struct{} // those not ended, for Resume and Paused
	wg      sync.WaitGroup
	st      counters
}

// NewSubscriber wraps sub (see [Subscriber]). It fails with an error
// wrapping [ErrInvalidOption] for a bad option, or when neither
// WithKeyMetadata nor WithKeyFunc is given.
func NewSubscriber(sub message.Subscriber, opts ...Option) (*Subscriber, error) {
	if sub == nil {
		return nil, errors.New("seqwatermill: NewSubscriber: nil subscriber")
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	s := &Subscriber{sub: sub, opts: o, closing: make(chan struct{}), subs: map[*subscription]struct{}{}}
	if c := o.controller; c != nil {
		c.register(s)
	}
	return s, nil
}

// Subscribe subscribes the wrapped subscriber to topic and returns a
// channel of its messages, sent in order per key (see [Subscriber]). Ack
// or Nack each one. The channel is closed once the subscription ended (ctx
// done, Close, or the wrapped subscriber's channel closed) and every
// message sent on it was acked, nacked, or given up by the wrapped
// subscriber (its ctx done) or after WithCloseTimeout. Messages of a key
// that were queued and not sent are left un-acked to the wrapped
// subscriber, which redelivers them as it does those of a plain Router
// stopped mid-stream (with WithAckOnReceive they are sent on first); so
// are those of a key halted by WithHaltOnNack, which the end does not wait
// for (with WithAckOnReceive they are dropped and logged).
// After Close, Subscribe returns [ErrClosed].
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	// Not under s.mu: the wrapped Subscribe may wait (for a connection, a
	// stream), and Close, which ends that wait, must not wait for it.
	in, err := s.sub.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	sn, err := newSubscription(s, topic, in)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed { // Close closed the wrapped subscriber, which ends in
		return nil, ErrClosed
	}
	s.subs[sn] = struct{}{}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { // also when a KeyFunc's runtime.Goexit ended run
			s.mu.Lock()
			delete(s.subs, sn)
			s.mu.Unlock()
		}()
		sn.run(ctx)
	}()
	return sn.out, nil
}

// SubscribeInitialize calls the wrapped subscriber's, if it has one (see
// message.SubscribeInitializer), and otherwise returns nil.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if si, ok := s.sub.(message.SubscribeInitializer); ok {
		return si.SubscribeInitialize(topic)
	}
	return nil
}

// Close ends every subscription as the end of its ctx would (see
// Subscribe), closes the wrapped subscriber, waits for the subscriptions'
// channels to close, and returns the wrapped Close's error. As with any
// watermill subscriber, the messages in a handler at that moment have their
// ctx canceled, and an Ack that comes after the wrapped subscriber closed
// is lost to it (it redelivers the message); the Router waits for its
// handlers itself (RouterConfig.CloseTimeout). The Router calls Close when
// it closes. Close is safe to call again; a later call returns nil.
// Called from a handler, Close waits for that handler's own Ack, which
// cannot come while Close waits: it returns after WithCloseTimeout.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	if c := s.opts.controller; c != nil {
		c.unregister(s) // not under s.mu: the Controller's lock comes first
	}
	err := s.sub.Close()
	s.wg.Wait()
	return err
}
