package seqwatermill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Defaults of the options.
const (
	DefaultMaxBuffered  = 1000             // messages held per subscription, queued or in the handler
	DefaultCloseTimeout = 30 * time.Second // as watermill's RouterConfig.CloseTimeout
)

// KeyFunc returns the ordering key of msg: messages with the same key are
// handled one at a time, in the order the subscriber sent them. A key
// longer than 128 bytes is ordered under its SHA-256 sum, so that the
// memory a publisher's long keys take stays bounded once their messages
// are done. It runs on
// the subscription's dispatch goroutine, with no lock held; keep it fast. A
// panic in it is logged at Error with a *seqsched.PanicError (its value and
// stack), and the message is ordered under the empty key. A
// runtime.Goexit in it is logged, and ends the subscription as the end of
// its ctx would: the message is left un-acked.
type KeyFunc func(msg *message.Message) string

// BackoffFunc returns how long to wait before handing msg to the consumer
// again, after its attempt-th attempt (1 for the first) was nacked; err is
// [ErrNacked] (or what an [Interceptor] returned). A zero or negative wait
// retries at once. It runs on the message's key, with no lock held; ctx is
// the subscriber's message's. A backoff that panics or calls
// runtime.Goexit fails the message (see WithRetries). The shape is
// seqkafka's and seqjetstream's.
type BackoffFunc func(ctx context.Context, msg *message.Message, attempt int, err error) time.Duration

// DefaultBackoff is the BackoffFunc used without WithRetries' own: it
// waits 100ms after the first nacked attempt and doubles each time, up to
// 10s.
func DefaultBackoff(_ context.Context, _ *message.Message, attempt int, _ error) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < attempt && d < 10*time.Second; i++ {
		d *= 2
	}
	return min(d, 10*time.Second)
}

// An Option configures [NewSubscriber] and [Decorator]. Options are values
// that print as the call that made them ("WithMaxBuffered(10)").
type Option interface {
	apply(*options)
	String() string
}

// options is the validated configuration of a Subscriber, written only by
// newOptions.
type options struct {
	key           KeyFunc
	keyName       string // the option that set key, for the error of a second one
	keyMetadata   string // WithKeyMetadata's name, or ""
	priority      string // metadata name of the High lane, or ""
	maxBuffered   int
	maxPerKey     int // 0: only maxBuffered
	maxConc       int // 0: no limit
	attempts      int // 0: until the handler acks
	backoff       BackoffFunc
	customBackoff bool
	closeTimeout  time.Duration
	ackTimeout    time.Duration // WithSubscriberAckTimeout, or 0
	interceptors  []Interceptor
	ackOnReceive  bool
	haltOnNack    bool
	controller    *Controller // nil: none
	logger        watermill.LoggerAdapter
	errs          []*OptionError // what the options found wrong
}

func newOptions(opts []Option) (options, error) {
	o := options{
		maxBuffered:  DefaultMaxBuffered,
		backoff:      DefaultBackoff,
		closeTimeout: DefaultCloseTimeout,
		logger:       watermill.NewSlogLogger(nil),
	}
	for i, opt := range opts {
		if opt == nil {
			bad(&o, fmt.Sprintf("option %d", i), "must not be nil")
			continue
		}
		opt.apply(&o)
	}
	if o.key == nil && len(o.errs) == 0 {
		bad(&o, "NewSubscriber", "needs WithKeyMetadata or WithKeyFunc")
	}
	if o.haltOnNack && o.attempts == 0 && len(o.errs) == 0 {
		bad(&o, "WithHaltOnNack()", "needs WithRetries with attempts >= 1 (with 0 no attempt is the last)")
	}
	if len(o.errs) == 0 {
		o.checkTimers()
	}
	if o.maxPerKey > o.maxBuffered {
		o.maxPerKey = 0 // the total bound is the tighter one
	}
	switch len(o.errs) {
	case 0:
		return o, nil
	case 1:
		return o, o.errs[0]
	}
	errs := make([]error, len(o.errs))
	for i, e := range o.errs {
		errs[i] = e
	}
	return o, errors.Join(errs...)
}

// checkTimers checks the backoff against the wrapped subscriber's ack
// timer, where WithSubscriberAckTimeout tells it: a retry's backoff at
// least as long gives the message up during every such wait (the
// subscriber then sends its next message, which waits behind the key, and
// the broker redelivers the message later: work for nothing). A
// BackoffFunc of the user's is user code, not called here.
func (o *options) checkTimers() {
	d := o.ackTimeout
	if d == 0 {
		return
	}
	name := fmt.Sprintf("WithSubscriberAckTimeout(%v)", d)
	if o.customBackoff {
		return
	}
	last := o.attempts - 1 // the retries' backoffs: after attempts 1 .. attempts-1
	if o.attempts == 0 {
		last = 32 // until acked: DefaultBackoff reaches its cap long before
	}
	for a := 1; a <= last; a++ {
		if w := DefaultBackoff(context.Background(), nil, a, ErrNacked); w >= d {
			bad(o, name, fmt.Sprintf("DefaultBackoff waits %v after attempt %d: each backoff must be shorter, or the subscriber gives the message up during it (set WithRetries' attempts or backoff, or a longer ack timeout)", w, a))
			return
		}
	}
}

type option struct {
	name string
	fn   func(*options)
}

func (o option) apply(opts *options) { o.fn(opts) }
func (o option) String() string      { return o.name }

func bad(o *options, name, reason string) {
	o.errs = append(o.errs, &OptionError{Option: name, Reason: reason})
}

func setKey(o *options, name string, fn KeyFunc) {
	if o.key != nil {
		bad(o, name, "cannot be combined with "+o.keyName)
		return
	}
	o.key, o.keyName = fn, name
}

// WithKeyMetadata orders messages by the value of their metadata field
// name. Messages without it share the empty key (ordered together, one at
// a time); the first one is logged at Error with [ErrNoKey]. name
// must not be empty; it cannot be combined with WithKeyFunc. One of the
// two is required.
func WithKeyMetadata(name string) Option {
	n := fmt.Sprintf("WithKeyMetadata(%q)", name)
	return option{n, func(o *options) {
		if name == "" {
			bad(o, n, "must not be empty")
			return
		}
		setKey(o, n, func(msg *message.Message) string { return msg.Metadata.Get(name) })
		o.keyMetadata = name
	}}
}

// WithKeyFunc orders messages by the key fn returns (see [KeyFunc]). fn
// must not be nil; it cannot be combined with WithKeyMetadata.
func WithKeyFunc(fn KeyFunc) Option {
	n := "WithKeyFunc(fn)"
	if fn == nil {
		n = "WithKeyFunc(nil)"
	}
	return option{n, func(o *options) {
		if fn == nil {
			bad(o, n, "must not be nil")
			return
		}
		setKey(o, n, fn)
	}}
}

// WithPriorityMetadata turns on the High lane: a message whose metadata
// field name is "high" (any case) is handled before the queued messages of
// its key, never interrupting the one in the handler. This reorders
// messages within a key, by design. name must not be empty. Without this
// option every message is Normal.
func WithPriorityMetadata(name string) Option {
	n := fmt.Sprintf("WithPriorityMetadata(%q)", name)
	return option{n, func(o *options) {
		if name == "" {
			bad(o, n, "must not be empty")
			return
		}
		o.priority = name
	}}
}

// WithMaxBuffered bounds the messages a subscription holds, queued behind
// their key or in the handler. At the bound the subscription stops taking
// messages from the subscriber until one is done, which pushes back on it
// as a slow handler would. n must be >= 1; the default is
// DefaultMaxBuffered.
func WithMaxBuffered(n int) Option {
	name := fmt.Sprintf("WithMaxBuffered(%d)", n)
	return option{name, func(o *options) {
		if n < 1 {
			bad(o, name, "must be >= 1")
			return
		}
		o.maxBuffered = n
	}}
}

// WithMaxPerKey bounds the messages of one key a subscription holds. A
// message of a key at the bound stops the subscription from taking more
// messages from the subscriber, for every key, until one of that key is
// done: a hot key then pushes back on the subscriber instead of filling
// the whole buffer. n must be >= 1; without it only WithMaxBuffered
// applies.
func WithMaxPerKey(n int) Option {
	name := fmt.Sprintf("WithMaxPerKey(%d)", n)
	return option{name, func(o *options) {
		if n < 1 {
			bad(o, name, "must be >= 1")
			return
		}
		o.maxPerKey = n
	}}
}

// WithMaxConcurrency bounds how many keys have a message in the handler at
// once; keys beyond it wait their turn in one FIFO. A message waiting out
// its retry backoff counts against the bound. n must be >= 0; 0 (the
// default) means no limit beyond WithMaxBuffered.
func WithMaxConcurrency(n int) Option {
	name := fmt.Sprintf("WithMaxConcurrency(%d)", n)
	return option{name, func(o *options) {
		if n < 0 {
			bad(o, name, "must be >= 0 (0 means no limit)")
			return
		}
		o.maxConc = n
	}}
}

// WithRetries sets how a nacked message is retried in place: the handler
// (the Router's, with its middleware) is given a fresh copy of the message
// after backoff(attempt), while the later messages of its key wait.
// attempts is how many times the handler is tried; 0 (the default) means
// until it acks. A nil backoff keeps DefaultBackoff. attempts must be >= 0.
// A backoff (or, in a message's turn, a logger) that panics or calls
// runtime.Goexit fails the message: it is nacked (with WithAckOnReceive,
// dropped), logged at Error with the panic's value and stack, and the key
// goes on.
//
// What a nack leads to is one of three choices:
//
//   - Retry until the handler acks (attempts 0): the key waits as long as
//     it takes; use watermill's Poison middleware to move a message that
//     can never succeed aside.
//   - Go on (attempts >= 1): after the last nacked attempt the
//     subscriber's message is nacked and the key goes on; the subscriber
//     redelivers it as it does any Nack, possibly after later messages of
//     its key. With WithAckOnReceive it is dropped instead, and logged at
//     Error. Use it where a message that failed may be handled late, or
//     not at all.
//   - Halt the key (attempts >= 1 and [WithHaltOnNack]): after the last
//     nacked attempt the message is held, neither acked nor nacked, and
//     the key's later messages wait until [Subscriber.Resume] (or
//     [Controller.Resume]) hands it to the handler again, first. Use it
//     where a later message must never be handled after an earlier one
//     failed ("withdraw 50, deposit 100, withdraw 150"), and someone can
//     fix the cause and resume the key.
func WithRetries(attempts int, backoff BackoffFunc) Option {
	name := fmt.Sprintf("WithRetries(%d, backoff)", attempts)
	if backoff == nil {
		name = fmt.Sprintf("WithRetries(%d, nil)", attempts)
	}
	return option{name, func(o *options) {
		if attempts < 0 {
			bad(o, name, "attempts must be >= 0 (0 means until the handler acks)")
			return
		}
		o.attempts = attempts
		if backoff != nil {
			o.backoff, o.customBackoff = backoff, true
		}
	}}
}

// WithCloseTimeout bounds how long Close, and the end of a subscription
// (its ctx canceled), wait for the messages in the handler (and, with
// WithAckOnReceive, the queued ones) before giving up on them. d must be
// > 0; the default is DefaultCloseTimeout, the Router's own default.
func WithCloseTimeout(d time.Duration) Option {
	name := fmt.Sprintf("WithCloseTimeout(%v)", d)
	return option{name, func(o *options) {
		if d <= 0 {
			bad(o, name, "must be > 0")
			return
		}
		o.closeTimeout = d
	}}
}

// WithSubscriberAckTimeout tells the Subscriber that the wrapped one gives
// an un-acked message up d after sending it (watermill-nats:
// SubscriberConfig.AckWaitTimeout, 30s by default), so that NewSubscriber
// can check the timers that must fit inside it: with the default backoff,
// each retry's wait must be shorter than d, or it fails with an
// *OptionError. (A wait as long gives the message up; order holds, see
// [ErrGivenUp], but the subscriber stalls for d and the broker redelivers
// the message for nothing.) d must be > 0. Without it nothing is checked;
// the README lists what each broker's timers require.
func WithSubscriberAckTimeout(d time.Duration) Option {
	name := fmt.Sprintf("WithSubscriberAckTimeout(%v)", d)
	return option{name, func(o *options) {
		if d <= 0 {
			bad(o, name, "must be > 0")
			return
		}
		o.ackTimeout = d
	}}
}

// WithAckOnReceive acks the subscriber's message as soon as it is queued
// behind its key, instead of after the handler acked it. A subscriber that
// sends one message at a time and waits for its Ack (gochannel with
// BlockPublishUntilSubscriberAck, watermill-nats, watermill-amqp) then
// sends the next at once, so keys run in parallel; what is queued lives
// only in this process. Use it only where that loses nothing that matters:
// an in-process subscriber such as gochannel, which holds nothing durable
// anyway, or events that may be lost on a crash. A Nack is retried in
// place (see WithRetries). Close cancels the ctx of the messages in the
// handler, as a subscriber's Close does, and hands the queued messages to
// the handler before it returns, within WithCloseTimeout; a message
// nacked once Close began is not retried. Those, the ones a key halted by
// WithHaltOnNack holds, and any not handed over within the timeout are
// dropped, each logged at Error with its key and UUID.
func WithAckOnReceive() Option {
	return option{"WithAckOnReceive()", func(o *options) { o.ackOnReceive = true }}
}

// WithHaltOnNack halts a key when a message of it is nacked on its last
// attempt (see WithRetries, which it needs, with attempts >= 1): the key
// is paused and the message is held, neither acked nor nacked, so that the
// subscriber cannot redeliver it behind the key's later messages.
// The halt is logged at Error, with the key. The later messages of the key
// stay queued behind it, counted against WithMaxBuffered and WithMaxPerKey
// (so a halted key pushes back on the subscriber once the bounds are
// reached); the other keys go on.
//
// [Subscriber.Resume] (or [Controller.Resume], for a Router's
// subscribers) ends the halt: the held message is handled first, with a
// fresh copy and WithRetries' attempts again, then the later ones in order;
// if it fails them all again, the key halts again. Until then
// [Subscriber.Paused] reports the key.
//
// At Close (or the end of the subscription) the halted keys' messages are
// left un-acked, for the subscriber to redeliver, and Close does not wait
// for them; with WithAckOnReceive they were acked already, and are dropped
// and logged at Error.
//
// A halted message stays un-acked while the key is halted: a subscriber
// that waits for each Ack before it sends the next message (the README's
// table) sends nothing more until it gives the message up (watermill-nats'
// AckWaitTimeout), unless WithAckOnReceive. A redelivery of the held
// message takes its place, and Resume hands the message over at once
// whether or not the subscriber gave it up (see [ErrGivenUp]).
func WithHaltOnNack() Option {
	return option{"WithHaltOnNack()", func(o *options) { o.haltOnNack = true }}
}

// WithController registers the Subscribers that NewSubscriber (or the
// Decorator, for each of a Router's handlers) makes with c, so that
// c.Resume and c.Paused reach keys halted by WithHaltOnNack in any of
// them. c must not be nil.
func WithController(c *Controller) Option {
	return option{"WithController(...)", func(o *options) {
		if c == nil {
			bad(o, "WithController(nil)", "must not be nil")
			return
		}
		o.controller = c
	}}
}

// WithLogger sets where the subscriber logs: messages dropped (Error), a
// KeyFunc's panic (Error), a key halted (Error, [ErrHalted]), a message
// given up by the subscriber (Error, [ErrGivenUp]), the first message
// without the key metadata (Error, [ErrNoKey]), retries and redeliveries
// (Info). Keys and UUIDs come from publishers: the "key" and
// "message_uuid" fields hold them as quoted Go strings, cut to 64 bytes,
// so that a key with a line break cannot forge a line in a logger that
// does not quote its values (watermill's StdLogger quotes only values with
// spaces). The default is watermill.NewSlogLogger(nil), slog's default
// logger. l must not be nil.
func WithLogger(l watermill.LoggerAdapter) Option {
	return option{"WithLogger(...)", func(o *options) {
		if l == nil {
			bad(o, "WithLogger(nil)", "must not be nil (pass watermill.NopLogger{} to discard logs)")
			return
		}
		o.logger = l
	}}
}
