package seqkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DeadLetterFunc receives a record that will not be handled: its
// attempts all failed, or one failed with a terminal error (see Terminal).
// attempts is how many attempts were made and err the last one's error.
// Once it returns nil the record counts as done (dead-lettered) and its
// offset can be committed. When it fails (an error, a panic as a
// *seqsched.PanicError, runtime.Goexit as an error wrapping
// seqsched.ErrGoexit) it is logged at Error and called again after the
// backoff, until it succeeds or the record leaves this consumer (its
// partition revoked or lost, or Close): a record is never committed past
// unless it was handled or dead-lettered. It runs on the record's key, so
// the key's later records wait for it. See DeadLetterTopic.
type DeadLetterFunc func(ctx context.Context, r *kgo.Record, attempts int, err error) error

// BackoffFunc returns how long to wait before the next call for record r:
// after its attempt-th attempt (1 for the first) failed with err, and
// before each new call of a failing dead-letter function (then attempt
// counts on: attempts + the dead-letter failures so far, and err is the
// dead-letter function's). A zero or negative wait retries at once. It
// runs on the record's key, with no lock held; ctx is the record's, as the
// handler's, and marks the call as the consumer's own (see Close). A
// backoff that panics or calls runtime.Goexit is logged at Error and
// DefaultBackoff gives that wait.
type BackoffFunc func(ctx context.Context, r *kgo.Record, attempt int, err error) time.Duration

// An Option configures a Consumer at NewConsumer or NewBatchConsumer.
// Options print as the call that made them.
type Option interface {
	apply(*config)
	String() string
}

type config struct {
	concurrency    int
	bufferHigh     int
	bufferLow      int
	attempts       int
	backoff        BackoffFunc
	deadLetter     DeadLetterFunc // nil: log at Error and drop
	priorityHeader string         // "" until WithPriorityHeader: no High lane
	unorderedNoKey bool
	drainTimeout   time.Duration
	commitInterval time.Duration
	commitTimeout  time.Duration
	maxMetadata    int
	batchSize      int
	batchLinger    time.Duration
	batchSet       bool         // WithBatch was given
	logger         *slog.Logger // nil: slog.Default() at each log
	interceptors   []Interceptor
	errs           []error
}

// Defaults of the consumer's options.
const (
	DefaultMaxConcurrency = 64
	DefaultMaxBuffered    = 1000 // per partition; the low mark is half
	DefaultAttempts       = 3
	DefaultPriorityHeader = "seqsched-priority" // a suggested name for WithPriorityHeader, not on by default
	DefaultDrainTimeout   = 15 * time.Second
	DefaultCommitInterval = time.Second
	DefaultCommitTimeout  = 10 * time.Second
	DefaultBatchSize      = 100
	DefaultBatchLinger    = 5 * time.Millisecond
)

// DefaultBackoff is the BackoffFunc used without WithRetries' own: it
// waits 100ms after the first failed attempt and doubles each time, up to
// 10s.
func DefaultBackoff(_ context.Context, _ *kgo.Record, attempt int, _ error) time.Duration {
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

// WithMaxConcurrency bounds how many handler calls run at once, over all
// keys and partitions (a batch is one call). n must be >= 1; the default
// is 64.
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

// WithMaxBuffered bounds each partition's records fetched and not done:
// at most high are taken; what a poll brings beyond them (at most one
// poll's worth: one poll takes at most max(1, (high-low)/2) records) waits,
// and the partition takes no more until at most low are taken. Each
// partition has its own bound, so one stuck on a key never stops the
// others (a partition that is behind while others are not stops fetching,
// with kgo's PauseFetchPartitions). The member thus holds at most
// high + (high-low)/2 records per assigned partition, plus what the client
// itself buffers (bounded by kgo's fetch size options). A paused
// partition is fetched again at the next fetch its broker answers, which
// can be one already waiting (up to kgo.FetchMaxWait) on the broker's
// other partitions. It must be 0 <= low < high; the default is 1,000 and
// 500.
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
// the dead-letter step, and the wait before each retry and each new call
// of a failing dead-letter function (see BackoffFunc; nil keeps
// DefaultBackoff). attempts must be >= 1; the default is 3. A record
// waiting out its backoff blocks only its own key and holds no concurrency
// slot.
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

// WithDeadLetter sets the dead-letter step: what happens to a record that
// will not be handled (see DeadLetterFunc). Without it the record is
// logged at Error (to WithLogger's logger, else slog.Default) and dropped.
// See DeadLetterTopic for a function that produces it to a dead-letter
// topic. fn must not be nil.
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

// WithPriorityHeader turns on the High lane: a record carrying header name
// with the value "high" (any case) is submitted on its key's High lane and
// runs before the key's queued records, never interrupting the running one.
// This reorders records within a key, by design. Without this option every
// record is Normal: any producer that can write to the topic could
// otherwise move its records ahead of other producers' queued records of
// the same key, so the lane is for topics whose producers are trusted to
// use it. name must not be empty; DefaultPriorityHeader is a suggestion.
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
// makes after its ctx ended. A commit made while the group rebalances may
// wait for the rebalance to end, so give d room for a rebalance: up to the
// group's rebalance timeout (kgo.RebalanceTimeout) when a member is slow to
// rejoin. d must be > 0; the default is 10s.
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

// WithMaxMetadataBytes bounds the commit metadata that lists the done
// ranges above each committed offset: set it to the brokers'
// offset.metadata.max.bytes when that is below the default 4,096
// (MaxMetadataBytes). What does not fit is left out, highest ranges first,
// and replayed by the next owner. Should a broker refuse a commit's
// metadata as too large anyway, the consumer halves its bound and commits
// again at once, and keeps the smaller bound. n must be >= 0; 0 commits no
// metadata (a new owner then replays everything above the committed
// offset).
func WithMaxMetadataBytes(n int) Option {
	name := fmt.Sprintf("WithMaxMetadataBytes(%d)", n)
	return optFunc{name, func(c *config) {
		if n < 0 {
			bad(c, name, "must be >= 0")
			return
		}
		c.maxMetadata = n
	}}
}

// WithBatch sets how NewBatchConsumer groups records: a batch takes at
// most size records, at most one per key, and is handed to the handler
// once it is full or linger after its first record joined, whichever comes
// first (with linger 0, as soon as a concurrency slot is free). Batches
// run at the same time only as far as a partition's buffer holds them:
// keep WithMaxBuffered's high mark at about twice WithMaxConcurrency times
// size. size must be >= 1 and linger >= 0; the defaults are 100 and 5ms.
// NewConsumer rejects it.
func WithBatch(size int, linger time.Duration) Option {
	name := fmt.Sprintf("WithBatch(%d, %v)", size, linger)
	return optFunc{name, func(c *config) {
		if size < 1 || linger < 0 {
			bad(c, name, "must be size >= 1, linger >= 0")
			return
		}
		c.batchSize, c.batchLinger, c.batchSet = size, linger, true
	}}
}

// WithLogger sets where the consumer logs: fetch and commit errors (Warn),
// ignored commit metadata (Warn), records dropped by the default
// dead-letter step, dead-letter functions that fail, backoffs that panic,
// and user functions that call runtime.Goexit (Error). l must not be nil; without this option
// the consumer logs to slog.Default() (as it is at each log). The logger
// runs with no lock held and may panic (the line is lost), call
// runtime.Goexit (see the package's design notes) or call back into the
// consumer with the ctx it is given.
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
// NewBatchConsumer rejects it: a batch call handles many records.
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
		concurrency:    DefaultMaxConcurrency,
		bufferHigh:     DefaultMaxBuffered,
		bufferLow:      DefaultMaxBuffered / 2,
		attempts:       DefaultAttempts,
		backoff:        DefaultBackoff,
		drainTimeout:   DefaultDrainTimeout,
		commitInterval: DefaultCommitInterval,
		commitTimeout:  DefaultCommitTimeout,
		maxMetadata:    MaxMetadataBytes,
		batchSize:      DefaultBatchSize,
		batchLinger:    DefaultBatchLinger,
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
