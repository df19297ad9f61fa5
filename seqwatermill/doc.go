// Package seqwatermill gives a watermill Router messages of one key handled
// one at a time and in order, and messages of different keys handled at
// once, with seqsched underneath. Watermill's Router starts a goroutine per
// message, so order comes only from a subscriber that sends one message at
// a time; a middleware cannot restore it, because the messages of a key
// reach it on racing goroutines. This package sits below the Router, as a
// subscriber decorator: one line.
//
//	router.AddSubscriberDecorators(seqwatermill.Decorator(
//		seqwatermill.WithKeyMetadata("account_id"),
//	))
//
// The handlers, middleware (Retry, Poison, ...) and plugins stay as they
// are. A message of a key reaches the Router only after the previous one of
// its key was acked, and the subscriber's message is acked only after the
// Router acked it (see [Subscriber] for every guarantee).
//
// A nacked message is retried in place while the key's later messages
// wait; after the last attempt (WithRetries) the key goes on, or, with
// [WithHaltOnNack], halts until an operator resumes it through a
// [Controller].
//
// The parallelism comes from the wrapped subscriber: one that sends the
// next message before the previous is acked gives keys in parallel; one
// that waits for each Ack (watermill-nats, watermill-amqp, watermill-kafka
// as of this writing) gives one message at a time, in order, with or
// without this package, unless [WithAckOnReceive] acks each message as it
// is queued (for in-process subscribers such as gochannel). The README has
// the table. For Kafka and NATS JetStream, this project's own kafka and
// jetstream modules fetch in parallel and commit or ack in order.
//
// # Which file holds what
//
//   - subscriber.go: Decorator, NewSubscriber, the Subscriber and its Close.
//   - subscription.go: one Subscribe: the dispatch loop (key, High lane,
//     bounds), the per-message task (send a copy, wait for its Ack or
//     Nack, retry in place, settle the subscriber's message), and the end
//     of a subscription.
//   - halt.go: halting a key (WithHaltOnNack): holding its messages,
//     handing them over first on Resume, giving them up at the end;
//     Subscriber.Resume and Paused, and the Controller that reaches a
//     Router's Subscribers.
//   - options.go, errors.go: options, defaults, errors.
package seqwatermill
