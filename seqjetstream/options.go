package seqjetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// An Option configures a Consumer at NewConsumer. It prints as the call
// that made it ("WithMaxBuffered(500)").
type Option interface {
	apply(*config)
	String() string
}

// BackoffFunc returns how long to wait before the next call for msg:
// after its attempt-th attempt (1 for the first) failed with err, and
// before each new call of a failing dead-letter function (then attempt
// counts on: attempts + the dead-letter failures so far, and err is the
// dead-letter function's). A zero or negative wait retries at once. It
// runs on the message's key, with no lock held; ctx is the message's, as
// the handler's, and marks the call as the consumer's own (see Close). A
// backoff that panics or calls runtime.Goexit is logged at Error and
// DefaultBackoff gives that wait.
type BackoffFunc func(ctx context.Context, msg jetstream.Msg, attempt int, err error) time.Duration

// DeadLetterFunc receives a message that will not be handled: its
// attempts all failed, or one failed with a terminal error (see Terminal).
// attempts is how many attempts were made and err the last one's error.
// Once it returns nil the message is dead-lettered, and terminated
// (TermWithReason). When it fails (an error, a panic as a
// *seqsched.PanicError, runtime.Goexit as an error wrapping
// seqsched.ErrGoexit) it is logged at Error and called again after the
// backoff, until it succeeds or the message leaves this consumer (Close
// gives it back, or the partition is lost): a message is never terminated
// unless it was dead-lettered (or has no dead-letter step). It runs on the
// message's key, so the key's later messages wait for it, and the message
// is kept from redelivery with InProgress meanwhile. See
// DeadLetterSubject.
type DeadLetterFunc func(ctx context.Context, msg jetstream.Msg, attempts int, err error) error

// KeyFunc returns the ordering key of msg: messages with the same key (on
// the same JetStream consumer) are handled one at a time, in stream order.
// It runs on the consumer's fetch goroutine, with no lock held; keep it
// fast. A panic or runtime.Goexit in it is logged, and the message is
// ordered under the empty key.
type KeyFunc func(msg jetstream.Msg) string

// Defaults of the consumer's options.
const (
	DefaultMaxConcurrency = 64
	DefaultMaxBuffered    = 1000 // also the server's default MaxAckPending
	DefaultAttempts       = 3
	DefaultFetchExpiry    = 5 * time.Second
	DefaultPriorityHeader = "Seqsched-Priority"
)

// DefaultBackoff is the BackoffFunc used without WithRetries' own: it
// waits 100ms after the first failed attempt and doubles each time, up to
// 10s.
func DefaultBackoff(_ context.Context, _ jetstream.Msg, attempt int, _ error) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < attempt && d < 10*time.Second; i++ {
		d *= 2
	}
	return min(d, 10*time.Second)
}

type config struct {
	concurrency    int
	buffered       int
	attempts       int
	backoff        BackoffFunc
	deadLetter     DeadLetterFunc
	key            KeyFunc
	keyHeader      string
	priorityHeader string // "" until WithPriorityHeader: no High lane
	fetchExpiry    time.Duration
	expirySet      bool
	handover       jetstream.JetStream
	balanceJS      jetstream.JetStream
	balanceBucket  string
	logger         *slog.Logger
	interceptors   []Interceptor
	errs           []error
}

type optFunc struct {
	name string
	fn   func(*config)
}

func (o optFunc) apply(c *config) { o.fn(c) }
func (o optFunc) String() string  { return o.name }

func bad(c *config, opt, reason string) {
	c.errs = append(c.errs, &OptionError{Option: opt, Reason: reason})
}

// WithMaxConcurrency bounds how many messages run their handler at once,
// over all keys and consumers. n must be >= 1; the default is 64.
func WithMaxConcurrency(n int) Option {
	name := fmt.Sprintf("WithMaxConcurrency(%d)", n)
	return optFunc{name, func(c *config) {
		if n < 1 {
			bad(c, name, "must be >= 1")
			return
		}
		c.concurrency = n
	}}
}

// WithMaxBuffered bounds the messages held per JetStream consumer (per
// partition): delivered and not yet acknowledged, terminated or given
// back. Each consumer's MaxAckPending must be at most n (NewConsumer checks
// it), so that the server, not this bound, stops the flow: a consumer never
// holds more than its MaxAckPending, and memory is bounded by the sum of
// the consumers' MaxAckPending. n must be >= 1; the default is 1000, the
// server's default MaxAckPending.
func WithMaxBuffered(n int) Option {
	name := fmt.Sprintf("WithMaxBuffered(%d)", n)
	return optFunc{name, func(c *config) {
		if n < 1 {
			bad(c, name, "must be >= 1")
			return
		}
		c.buffered = n
	}}
}

// WithRetries sets how many times a message is attempted before it goes to
// the dead-letter step, and the wait before each retry and each new call
// of a failing dead-letter function (see BackoffFunc; nil keeps
// DefaultBackoff). attempts must be >= 1; the default is 3. A message
// waiting out its backoff blocks only its own key, holds no concurrency
// slot, and is kept from redelivery with InProgress.
func WithRetries(attempts int, backoff BackoffFunc) Option {
	name := fmt.Sprintf("WithRetries(%d, backoff)", attempts)
	if backoff == nil {
		name = fmt.Sprintf("WithRetries(%d, nil)", attempts)
	}
	return optFunc{name, func(c *config) {
		if attempts < 1 {
			bad(c, name, "attempts must be >= 1")
			return
		}
		c.attempts = attempts
		if backoff != nil {
			c.backoff = backoff
		}
	}}
}

// WithDeadLetter sets the dead-letter step: what happens to a message that
// will not be handled, before it is terminated (see DeadLetterFunc).
// Without it the message is logged at Error and terminated. See
// DeadLetterSubject for a function that publishes it to a dead-letter
// stream. fn must not be nil.
func WithDeadLetter(fn DeadLetterFunc) Option {
	name := "WithDeadLetter(fn)"
	if fn == nil {
		name = "WithDeadLetter(nil)"
	}
	return optFunc{name, func(c *config) {
		if fn == nil {
			bad(c, name, "must not be nil")
			return
		}
		c.deadLetter = fn
	}}
}

// WithKeyHeader orders messages by the value of header name instead of
// their subject. Messages without the header share the empty key (ordered
// together, per consumer). name must not be empty; it cannot be combined
// with WithKeyFunc.
func WithKeyHeader(name string) Option {
	n := fmt.Sprintf("WithKeyHeader(%q)", name)
	return optFunc{n, func(c *config) {
		if name == "" {
			bad(c, n, "must not be empty")
			return
		}
		c.keyHeader = name
	}}
}

// WithKeyFunc orders messages by the key fn returns instead of their
// subject (see KeyFunc). fn must not be nil; it cannot be combined with
// WithKeyHeader.
func WithKeyFunc(fn KeyFunc) Option {
	name := "WithKeyFunc(fn)"
	if fn == nil {
		name = "WithKeyFunc(nil)"
	}
	return optFunc{name, func(c *config) {
		if fn == nil {
			bad(c, name, "must not be nil")
			return
		}
		c.key = fn
	}}
}

// WithPriorityHeader turns on the High lane: a message carrying header
// name with the value "high" (any case) runs before the queued messages of
// its key, never interrupting the running one. This reorders messages
// within a key, by design. name must not be empty; DefaultPriorityHeader
// is a suggestion. Without this option every message is Normal.
func WithPriorityHeader(name string) Option {
	n := fmt.Sprintf("WithPriorityHeader(%q)", name)
	return optFunc{n, func(c *config) {
		if name == "" {
			bad(c, n, "must not be empty")
			return
		}
		c.priorityHeader = name
	}}
}

// WithFetchExpiry sets how long each pull request waits for messages on the
// server. For a pinned consumer each pull also renews the pin, so d must be
// below every pinned consumer's PinnedTTL. d must be >= 100ms; the default
// is 5s, capped on a pinned consumer at half its PinnedTTL. Whatever d, a
// pinned consumer's pulls wait at most a third of its shortest AckWait
// (or BackOff step), at least 100ms: a message's answer window counts
// from the start of the pull that brought it (see the package doc).
func WithFetchExpiry(d time.Duration) Option {
	name := fmt.Sprintf("WithFetchExpiry(%v)", d)
	return optFunc{name, func(c *config) {
		if d < 100*time.Millisecond {
			bad(c, name, "must be >= 100ms")
			return
		}
		c.fetchExpiry, c.expirySet = d, true
	}}
}

// WithHandover lets Close unpin the pinned consumers this instance owns,
// through js, so that a standby instance takes each over at once instead
// of after its PinnedTTL. Close unpins last, once its running handlers
// are done (or its ctx ended) and nothing more can be sent for the
// partitions; the standby catches up first (see the package doc), so key
// order holds. Give js the connection of the consumers' own messages:
// then the unpin follows every answer on the wire. Close waits at most a
// second for the server to answer the unpins, even past its ctx; a
// partition whose unpin gets no answer in time (the server is down) is
// taken over after its PinnedTTL, as without this option.
//
// js also serves a partition that a stored Nats-Pin-Id header cost its
// pin: a message published with such a header (forwarded with all its
// headers, say) makes nats.go send that pin with its next pull, which the
// server refuses. The owner then unpins the partition at once, so that
// the next pull (its own or a standby's) is pinned anew and catches up;
// without this option the partition waits up to its PinnedTTL. So too
// for an owner whose pulls the server stops serving while it pins this
// instance and holds messages for it: after a few pulls that bring
// nothing, the owner unpins the partition (see the README for the bound).
// js must not be nil.
func WithHandover(js jetstream.JetStream) Option {
	name := "WithHandover(js)"
	if js == nil {
		name = "WithHandover(nil)"
	}
	return optFunc{name, func(c *config) {
		if js == nil {
			bad(c, name, "must not be nil")
			return
		}
		c.handover = js
	}}
}

// WithBalance shares the pinned consumers (the partitions) out evenly
// among the instances that run a Consumer with the same bucket, and
// moves them when an instance joins or leaves: no instance owns more
// than one partition above another once the membership is stable.
// Without it the server pins each partition to whichever instance pulls
// first, and nothing moves it back.
//
// bucket names a JetStream key-value bucket on the same server, with a
// TTL (MaxAge) at most the smallest PinnedTTL of the pinned consumers,
// on file storage so that it survives a server restart, for example
//
//	js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "orders-owners", TTL: 5 * time.Second, Storage: jetstream.FileStorage})
//
// A bucket that is missing, at Run or later (deleted, or lost by a server
// that kept it in memory), is made again as it was, or, never seen, on
// file storage with the smallest PinnedTTL as its TTL.
//
// Each instance keeps a key of its own there, renewed every third of the
// TTL, whose value names the partitions assigned to it; each renewal
// reads every member's, and every instance computes the same assignment
// from them: each keeps what it has up to its share and the rest goes to
// those with room, so a join moves at most ⌈P/n⌉ partitions (P
// partitions, n members), all to the joiner, and a leave only the
// leaver's. An instance pulls only for the partitions assigned to it;
// one that owns a partition assigned elsewhere steps down: it gives back
// what has not started, lets what runs finish and acknowledges it (for at
// most the message's answer window and half the PinnedTTL; past that it
// comes back after AckWait) and unpins the partition through js, and the
// assignee catches up, so key order holds across every move. A standby takes a partition over
// when its owner leaves: at once after the owner's Close, which deletes
// its key, and within the TTL and PinnedTTL after a crash. It does not
// take over from an owner that keeps heartbeating but stopped pulling
// one partition (a key function that blocks its fetch goroutine).
//
// Membership is never needed for a partition to be consumed: once
// heartbeats have failed for the bucket's TTL, the instance pulls for
// every partition, as without this option (the server keeps each pinned
// to its owner and moves a dead one's after PinnedTTL), and logs it at
// Warn; it balances again once a heartbeat succeeds.
//
// Every instance must be given the same pinned consumers, and the bucket
// must serve no other set of consumers: each member takes its share of
// the partitions it knows of. Run returns an *OptionError when the
// bucket's TTL is missing or above a PinnedTTL. js and bucket must not be
// nil or empty, and at least one consumer must be pinned.
func WithBalance(js jetstream.JetStream, bucket string) Option {
	name := fmt.Sprintf("WithBalance(js, %q)", bucket)
	if js == nil {
		name = fmt.Sprintf("WithBalance(nil, %q)", bucket)
	}
	return optFunc{name, func(c *config) {
		switch {
		case js == nil:
			bad(c, name, "js must not be nil")
		case bucket == "":
			bad(c, name, "bucket must not be empty")
		default:
			c.balanceJS, c.balanceBucket = js, bucket
		}
	}}
}

// WithLogger sets where the consumer logs: messages terminated without a
// dead-letter step, dead-letter functions that fail, backoff or key
// functions that panic (Error), fetch errors and lost partitions (Warn). l must not be nil; the
// default is slog.Default(), so failures are visible unless routed
// elsewhere.
func WithLogger(l *slog.Logger) Option {
	name := "WithLogger(l)"
	if l == nil {
		name = "WithLogger(nil)"
	}
	return optFunc{name, func(c *config) {
		if l == nil {
			bad(c, name, "must not be nil")
			return
		}
		c.logger = l
	}}
}

// WithInterceptor wraps each handler call in f (see Interceptor). Several
// nest in the order given: the first is outermost. f must not be nil.
func WithInterceptor(f Interceptor) Option {
	name := "WithInterceptor(f)"
	if f == nil {
		name = "WithInterceptor(nil)"
	}
	return optFunc{name, func(c *config) {
		if f == nil {
			bad(c, name, "must not be nil")
			return
		}
		c.interceptors = append(c.interceptors, f)
	}}
}

func newConfig(opts []Option) (*config, error) {
	c := &config{
		concurrency: DefaultMaxConcurrency,
		buffered:    DefaultMaxBuffered,
		attempts:    DefaultAttempts,
		backoff:     DefaultBackoff,
		fetchExpiry: DefaultFetchExpiry,
		logger:      slog.Default(),
	}
	for _, o := range opts {
		if o == nil {
			bad(c, "nil Option", "must not be nil")
			continue
		}
		o.apply(c)
	}
	if c.key != nil && c.keyHeader != "" {
		bad(c, "WithKeyFunc and WithKeyHeader", "choose one")
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return c, nil
}
