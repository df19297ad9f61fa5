package seqpg

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"time"
)

// BackoffFunc returns how long key waits before job's next attempt, after
// its attempt-th attempt (1 for the first) failed with err; ctx is the
// attempt's, as the handler's (seqkafka's and seqjetstream's shape). The wait is
// durable (the key's run_after): any worker takes the key up after it. A
// zero or negative wait retries at once. A backoff that panics is logged
// and DefaultBackoff gives the wait.
type BackoffFunc func(ctx context.Context, job *Job, attempt int, err error) time.Duration

// DefaultBackoff waits 100ms after the first failed attempt and doubles
// each time, up to 10s.
func DefaultBackoff(_ context.Context, _ *Job, attempt int, _ error) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < attempt && d < 10*time.Second; i++ {
		d *= 2
	}
	return min(d, 10*time.Second)
}

// Interceptor wraps each handler call, as seqkafka's and seqsched's
// interceptors do: to trace, log or measure every job in one place. It is
// called with the call's ctx and job and calls next to run the handler
// (and the interceptors after it) with the ctx it passes. Its return is
// the attempt's outcome; a panic in it fails the attempt as the handler's
// would. It runs inside the job's transaction, before it commits.
type Interceptor func(ctx context.Context, job *Job, next func(context.Context) error) error

// An Option configures a Worker at NewWorker. Options print as the call
// that made them.
type Option interface {
	apply(*config)
	String() string
}

type config struct {
	concurrency  int // 0: defaultConcurrency
	lease        time.Duration
	attempts     int
	backoff      BackoffFunc
	haltOnError  bool
	pollInterval time.Duration
	listen       bool
	drainTimeout time.Duration
	logger       *slog.Logger
	interceptors []Interceptor
	batch        int // WithBatchedCompletion's n; 0: the job's transaction
	groupJobs    int // WithGroupCommit's n
	groupDelay   time.Duration
	errs         []error
}

// Defaults of the worker's options.
const (
	DefaultLease        = 30 * time.Second
	DefaultAttempts     = 3
	DefaultPollInterval = time.Second
	DefaultDrainTimeout = 15 * time.Second
	DefaultGroupJobs    = 16
	DefaultGroupDelay   = 50 * time.Millisecond
)

func newConfig(opts []Option) config {
	c := config{
		lease:        DefaultLease,
		attempts:     DefaultAttempts,
		backoff:      DefaultBackoff,
		pollInterval: DefaultPollInterval,
		listen:       true,
		drainTimeout: DefaultDrainTimeout,
		groupJobs:    DefaultGroupJobs,
		groupDelay:   DefaultGroupDelay,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// concurrencyPerProc is WithMaxConcurrency's default per GOMAXPROCS.
const concurrencyPerProc = 8

// defaultConcurrency is WithMaxConcurrency's default for a pool of
// maxConns connections.
func defaultConcurrency(maxConns int32) int {
	return max(1, min(concurrencyPerProc*runtime.GOMAXPROCS(0), int(maxConns)-2))
}

func (c *config) log() *slog.Logger {
	if c.logger != nil {
		return c.logger
	}
	return slog.Default()
}

func (c *config) bad(o Option, reason string) {
	c.errs = append(c.errs, &OptionError{Option: o.String(), Reason: reason})
}

// WithMaxConcurrency bounds the keys a worker holds at once, and so the
// jobs it runs at once (one per key); it is also the bound of its
// seqsched scheduler's concurrency. The default is 8 per GOMAXPROCS, at
// most the pool's MaxConns less two (at least 1): in the default mode a
// held key keeps a pooled connection for its group's transaction, and
// the worker needs one for listening and one for claims, renewals and
// releases. More keys at once than the database serves well costs CPU per
// job and throughput (BENCHMARKS.md: on two cores shared by the worker
// and PostgreSQL, 8 or 16 keys at once ran small jobs at a median 155 or
// 161 µs of CPU each, 64 at 210 µs, 100 at 253 µs); raise it for handlers
// that wait on other services, with a pool to match.
func WithMaxConcurrency(n int) Option { return concurrencyOption(n) }

// WithLease sets how long a worker's hold on a key lasts without renewal;
// default DefaultLease, at least 100ms. The worker renews it every third
// of it while it holds the key; a worker frozen or cut off for longer loses
// the key to another worker, and its handler's ctx is canceled. A shorter
// lease recovers a dead worker's keys sooner. Each handler's transaction
// is also ended by PostgreSQL (idle_in_transaction_session_timeout) once
// idle for a lease, so that a frozen worker holds no row lock past it.
func WithLease(d time.Duration) Option { return leaseOption(d) }

// WithRetries sets how many attempts a job gets (at least 1; default
// DefaultAttempts) and the backoff between them (nil: DefaultBackoff).
// After the last, the job goes to the dead-letter table seqpg_dead, or
// halts its key under WithHaltOnError.
func WithRetries(attempts int, backoff BackoffFunc) Option {
	return &retriesOption{attempts, backoff}
}

// WithHaltOnError makes a job that used all its attempts (or failed with
// a Terminal error) halt its key, durably, instead of going to the
// dead-letter table: the key runs nothing until Resume (which retries the
// job) or Discard (which drops the key's backlog). Other keys go on.
func WithHaltOnError() Option { return haltOption{} }

// WithPollInterval sets how often a worker looks for work without being
// notified; default DefaultPollInterval. It bounds the delay of work that
// no NOTIFY announces: a key whose backoff ended, a dead worker's key
// whose lease expired, everything when notifications are lost (a pooler in
// transaction mode, a dropped connection, WithoutListen).
func WithPollInterval(d time.Duration) Option { return pollOption(d) }

// WithoutListen turns LISTEN/NOTIFY off: the worker finds new work by
// polling alone, every WithPollInterval. For connection poolers that do
// not carry notifications.
func WithoutListen() Option { return noListenOption{} }

// WithDrainTimeout bounds how long Run, when its ctx ends, waits for the
// running jobs before it cancels them; default DefaultDrainTimeout.
func WithDrainTimeout(d time.Duration) Option { return drainOption(d) }

// WithLogger sets the logger for failures; default slog.Default() at each
// log.
func WithLogger(l *slog.Logger) Option { return loggerOption{l} }

// WithInterceptor adds an interceptor around every handler call; the
// first given is the outermost.
func WithInterceptor(f Interceptor) Option { return &interceptorOption{f} }

// WithBatchedCompletion trades the job's transaction for throughput: the
// worker reads up to n (1..1000) of a key's next jobs in one statement,
// runs them one at a time in order, and records their completion in one
// statement, sent together with the read of the key's next jobs; a
// failure records the completions before it, then the failure, as usual.
// The handler's tx is nil: its writes are its own, committed before it
// returns, so a job's effects are at least once, everywhere (a worker
// that dies or loses the lease before the completion is recorded leaves
// those jobs to run again, in order, elsewhere).
//
// What stays: order per key is commit order, one running job per key
// across workers under the fenced lease (a lost lease records nothing),
// nothing lost on a kill or a freeze. What changes, besides the tx: the
// jobs read in one statement count as started, so Replace no longer
// rewrites them (it enqueues a new job), and Pause, Discard and a new High
// job take effect after them (at most n-1 more jobs). See BENCHMARKS.md
// for what it buys.
func WithBatchedCompletion(n int) Option { return batchOption(n) }

// WithGroupCommit sets how a key's consecutive jobs commit: together, in
// one transaction, each job under a savepoint of its own, up to n jobs
// (1..32) or until maxDelay (> 0) has passed since the first of them
// started, whichever comes first, and as soon as the key has no job
// ready; default DefaultGroupJobs and DefaultGroupDelay. n = 1 commits
// each job alone.
//
// Each job's writes and its completion still commit together, so effects
// in this database stay exactly once; a failed job's writes roll back
// alone, and its failure commits with the group's completions before it.
// What a group changes: a job's writes become visible to others, and
// release their row locks, when its group commits, up to n-1 jobs of its
// key later (or maxDelay plus the running job's time); and a worker that
// dies, or loses its lease, with a group open loses the group's
// completions with its writes, so up to n jobs run again, in order,
// elsewhere. Pause, a halt, a new High job, Replace and Discard still
// take effect at the key's next job. Ignored under WithBatchedCompletion.
func WithGroupCommit(n int, maxDelay time.Duration) Option { return groupOption{n, maxDelay} }

type (
	groupOption struct {
		n     int
		delay time.Duration
	}
	batchOption       int
	concurrencyOption int
	leaseOption       time.Duration
	retriesOption     struct {
		attempts int
		backoff  BackoffFunc
	}
	haltOption        struct{}
	pollOption        time.Duration
	noListenOption    struct{}
	drainOption       time.Duration
	loggerOption      struct{ l *slog.Logger }
	interceptorOption struct{ f Interceptor }
)

func (o batchOption) apply(c *config) {
	if o < 1 || o > 1000 {
		c.bad(o, "must be 1..1000")
		return
	}
	c.batch = int(o)
}

func (o groupOption) apply(c *config) {
	if o.n < 1 || o.n > maxGroupJobs || o.delay <= 0 {
		c.bad(o, fmt.Sprintf("n must be 1..%d and maxDelay > 0", maxGroupJobs))
		return
	}
	c.groupJobs, c.groupDelay = o.n, o.delay
}

// maxGroupJobs bounds a group: each job's savepoint is a subtransaction,
// and PostgreSQL slows down every snapshot while a transaction has more
// than 64 of them (its subtransaction cache overflows); a handler's own
// nested transactions count too.
const maxGroupJobs = 32

func (o concurrencyOption) apply(c *config) {
	if o < 1 {
		c.bad(o, "must be >= 1")
		return
	}
	c.concurrency = int(o)
}

func (o leaseOption) apply(c *config) {
	if time.Duration(o) < 100*time.Millisecond {
		c.bad(o, "must be >= 100ms")
		return
	}
	c.lease = time.Duration(o)
}

func (o *retriesOption) apply(c *config) {
	if o.attempts < 1 {
		c.bad(o, "attempts must be >= 1")
		return
	}
	c.attempts = o.attempts
	if o.backoff != nil {
		c.backoff = o.backoff
	}
}

func (haltOption) apply(c *config) { c.haltOnError = true }

func (o pollOption) apply(c *config) {
	if o <= 0 {
		c.bad(o, "must be > 0")
		return
	}
	c.pollInterval = time.Duration(o)
}

func (noListenOption) apply(c *config) { c.listen = false }

func (o drainOption) apply(c *config) {
	if o < 0 {
		c.bad(o, "must be >= 0")
		return
	}
	c.drainTimeout = time.Duration(o)
}

func (o loggerOption) apply(c *config) { c.logger = o.l }

func (o *interceptorOption) apply(c *config) {
	if o.f == nil {
		c.bad(o, "must not be nil")
		return
	}
	c.interceptors = append(c.interceptors, o.f)
}

func (o groupOption) String() string {
	return fmt.Sprintf("WithGroupCommit(%d, %v)", o.n, o.delay)
}
func (o batchOption) String() string       { return fmt.Sprintf("WithBatchedCompletion(%d)", int(o)) }
func (o concurrencyOption) String() string { return fmt.Sprintf("WithMaxConcurrency(%d)", int(o)) }
func (o leaseOption) String() string       { return fmt.Sprintf("WithLease(%v)", time.Duration(o)) }
func (o *retriesOption) String() string {
	return fmt.Sprintf("WithRetries(%d, %v)", o.attempts, o.backoff != nil)
}
func (haltOption) String() string           { return "WithHaltOnError()" }
func (o pollOption) String() string         { return fmt.Sprintf("WithPollInterval(%v)", time.Duration(o)) }
func (noListenOption) String() string       { return "WithoutListen()" }
func (o drainOption) String() string        { return fmt.Sprintf("WithDrainTimeout(%v)", time.Duration(o)) }
func (o loggerOption) String() string       { return "WithLogger(...)" }
func (o *interceptorOption) String() string { return fmt.Sprintf("WithInterceptor(%T)", o.f) }
