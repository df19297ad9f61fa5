package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Sentinel errors. Every error the package returns wraps one of these (or
// is a context error returned unchanged), so callers can test with errors.Is.
var (
	// ErrInvalidOption is wrapped by the *OptionError that NewConsumer
	// returns for an out-of-range option.
	ErrInvalidOption = errors.New("seqsched/kafka: invalid option")

	// ErrNilHandler is returned by NewConsumer when the handler is nil.
	ErrNilHandler = errors.New("seqsched/kafka: nil handler")

	// ErrNoGroup is returned by NewConsumer when the client options name no
	// consumer group (kgo.ConsumerGroup) or no topics to consume.
	ErrNoGroup = errors.New("seqsched/kafka: client options need kgo.ConsumerGroup and topics")

	// ErrClosed is returned by Run after Close has begun.
	ErrClosed = errors.New("seqsched/kafka: consumer closed")

	// ErrNilContext is returned when a nil context.Context is passed.
	ErrNilContext = errors.New("seqsched/kafka: nil context")

	// ErrNilClient is returned by DeadLetterTopic when the client is nil.
	ErrNilClient = errors.New("seqsched/kafka: nil client")

	// ErrHandlerGoexit is the error of an attempt whose handler (or
	// dead-letter function) called runtime.Goexit: a failed attempt, like
	// a panic.
	ErrHandlerGoexit = errors.New("seqsched/kafka: handler called runtime.Goexit")
)

// OptionError reports an option whose value is out of range. It wraps
// ErrInvalidOption.
type OptionError struct {
	Option string // the option as written, e.g. "WithMaxConcurrency(-1)"
	Reason string // what the value must be, e.g. "must be >= 1"
}

// Error returns "seqsched/kafka: <Option>: <Reason>: invalid option".
func (e *OptionError) Error() string {
	return "seqsched/kafka: " + e.Option + ": " + e.Reason + ": invalid option"
}

// Unwrap returns ErrInvalidOption.
func (e *OptionError) Unwrap() error { return ErrInvalidOption }

// HandlerPanicError is the error an attempt fails with when the handler
// panicked. The attempt counts like any failed attempt: it is retried, and
// after the last one the record is dead-lettered with this error.
type HandlerPanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the panicking goroutine's stack
}

// Error returns "seqsched/kafka: handler panicked: <Value>".
func (e *HandlerPanicError) Error() string {
	return fmt.Sprintf("seqsched/kafka: handler panicked: %v", e.Value)
}

// Unwrap returns Value when it is an error.
func (e *HandlerPanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// DeadLetterFunc receives a record whose attempts all failed, with the last
// attempt's error. Once it returns nil the record counts as done and its
// offset can be committed. When it returns an error it is called again after
// the backoff of the last attempt, until it succeeds or the partition is
// revoked or the consumer closed: a record is never committed past unless it
// was handled or dead-lettered. It runs on the record's key, so the key's
// later records wait for it.
type DeadLetterFunc func(ctx context.Context, r *kgo.Record, err error) error

// An Option configures a Consumer at NewConsumer. Options are values: they
// can be compared, and they print as the call that made them.
type Option interface {
	apply(*config)
	String() string
}

type config struct {
	concurrency    int
	bufferHigh     int
	bufferLow      int
	attempts       int
	backoff        func(attempt int) time.Duration
	deadLetter     DeadLetterFunc
	priorityHeader string
	unorderedNoKey bool
	drainTimeout   time.Duration
	commitInterval time.Duration
	commitTimeout  time.Duration
	logger         *slog.Logger
	errs           []error
}

// Defaults of the consumer's options.
const (
	DefaultMaxConcurrency = 64
	DefaultMaxBuffered    = 10000
	DefaultAttempts       = 3
	DefaultPriorityHeader = "seqsched-priority"
	DefaultDrainTimeout   = 15 * time.Second
	DefaultCommitInterval = time.Second
	DefaultCommitTimeout  = 10 * time.Second
)

// DefaultBackoff waits 100ms before the second attempt and doubles each
// time, up to 10s.
func DefaultBackoff(attempt int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < attempt && d < 10*time.Second; i++ {
		d *= 2
	}
	return min(d, 10*time.Second)
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

// WithMaxConcurrency bounds how many records run the handler at once, over
// all keys and partitions. n must be >= 1; the default is 64.
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

// WithMaxBuffered sets the backpressure marks: once high records are
// fetched but not done, the consumer pauses fetching its partitions, and
// resumes once at most low are left. It must be 0 <= low < high; the default
// is 10,000 and 5,000. The member never holds more than high records (plus
// what the client itself buffers, bounded by kgo's fetch size options).
func WithMaxBuffered(high, low int) Option {
	name := fmt.Sprintf("WithMaxBuffered(%d, %d)", high, low)
	return optFunc{name, func(c *config) {
		if low < 0 || high < 1 || low >= high {
			bad(c, name, "must be 0 <= low < high")
			return
		}
		c.bufferHigh, c.bufferLow = high, low
	}}
}

// WithRetries sets how many times a record is attempted before it goes to
// the dead-letter handler, and the wait before each retry: backoff(n) is
// the wait after the n-th failed attempt (nil keeps DefaultBackoff).
// attempts must be >= 1; the default is 3. A record waiting out its backoff
// blocks only its own key and holds no concurrency slot.
func WithRetries(attempts int, backoff func(attempt int) time.Duration) Option {
	name := fmt.Sprintf("WithRetries(%d, backoff)", attempts)
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

// WithDeadLetter sets what happens to a record whose attempts all failed.
// The default logs it at Error and drops it. See DeadLetterTopic for a
// handler that produces it to a dead-letter topic. fn must not be nil.
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

// WithPriorityHeader names the record header that marks a record urgent:
// a record carrying this header with the value "high" (any case) is
// submitted on its key's High lane and runs before the key's queued
// records. This reorders records within a key, by design. The default name
// is "seqsched-priority"; an empty name is rejected.
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

// WithUnorderedNoKey runs records that have no key (a nil Key) in parallel,
// each on its own, instead of in offset order per partition (the default).
func WithUnorderedNoKey() Option {
	return optFunc{"WithUnorderedNoKey()", func(c *config) { c.unorderedNoKey = true }}
}

// WithDrainTimeout bounds how long a revocation waits for the revoked
// partitions' records to finish before it commits what is done and lets
// the rebalance go on; records still running then see their ctx canceled,
// and queued ones never start. Keep it below the group's rebalance timeout.
// d must be > 0; the default is 15s.
func WithDrainTimeout(d time.Duration) Option {
	name := fmt.Sprintf("WithDrainTimeout(%v)", d)
	return optFunc{name, func(c *config) {
		if d <= 0 {
			bad(c, name, "must be > 0")
			return
		}
		c.drainTimeout = d
	}}
}

// WithCommitInterval sets how often done offsets are committed while the
// consumer runs (they are also committed on revocation and Close). d must
// be > 0; the default is 1s.
func WithCommitInterval(d time.Duration) Option {
	name := fmt.Sprintf("WithCommitInterval(%v)", d)
	return optFunc{name, func(c *config) {
		if d <= 0 {
			bad(c, name, "must be > 0")
			return
		}
		c.commitInterval = d
	}}
}

// WithCommitTimeout bounds each offset commit, including the one Close
// makes after its ctx ended. d must be > 0; the default is 10s.
func WithCommitTimeout(d time.Duration) Option {
	name := fmt.Sprintf("WithCommitTimeout(%v)", d)
	return optFunc{name, func(c *config) {
		if d <= 0 {
			bad(c, name, "must be > 0")
			return
		}
		c.commitTimeout = d
	}}
}

// WithLogger sets where the consumer logs: fetch and commit errors, ignored
// commit metadata (Warn), dead-lettered records with the default handler
// (Error). l must not be nil; without this option logs are discarded.
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

func newConfig(opts []Option) (*config, error) {
	c := &config{
		concurrency:    DefaultMaxConcurrency,
		bufferHigh:     DefaultMaxBuffered,
		bufferLow:      DefaultMaxBuffered / 2,
		attempts:       DefaultAttempts,
		backoff:        DefaultBackoff,
		priorityHeader: DefaultPriorityHeader,
		drainTimeout:   DefaultDrainTimeout,
		commitInterval: DefaultCommitInterval,
		commitTimeout:  DefaultCommitTimeout,
		logger:         slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		if o == nil {
			bad(c, "nil Option", "must not be nil")
			continue
		}
		o.apply(c)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return c, nil
}
