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
// A subscriber that gives a message up before it is acked (watermill-nats
// does after AckWaitTimeout, and JetStream redelivers it later) does not
// break the order: the key goes on only after the handler acked the
// message (see [ErrGivenUp] and the README's "Broker timers").
//
// # Which file holds what
//
//   - subscriber.go: Decorator, NewSubscriber, the Subscriber and its Close.
//   - subscription.go: one Subscribe: the dispatch loop (key, High lane,
//     bounds), the end of a subscription, and the gate that bounds what
//     is held.
//   - handle.go: a message's turn: send a copy, wait for its Ack or Nack
//     (through the interceptors), retry in place, settle the subscriber's
//     message.
//   - redelivery.go: messages the subscriber gives up and sends again: a
//     held message found by its key and UUID, and the acked ones
//     remembered.
//   - halt.go: halting a key (WithHaltOnNack): holding its messages,
//     handing them over first on Resume, giving them up at the end;
//     Subscriber.Resume, Paused, Halted and Backlog.
//   - controller.go: the Controller that reaches a Router's Subscribers.
//   - keys.go: keys as publishers choose them: bounded for memory, quoted
//     for logs.
//   - intercept.go, stats.go, options.go, errors.go, log.go: interceptors
//     and Attempt, Stats, options and defaults, errors, the guarded logger.
package seqwatermill
