package seqjetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/internal/histogram"
	"github.com/seqsched/seqsched/internal/intercept"
)

// Handler handles one message. It runs on a goroutine of the consumer,
// never at the same time as another message of the same key on the same
// JetStream consumer (see the package doc). A nil error means the message
// is done and it is acknowledged; an error, a panic or runtime.Goexit is a
// failed attempt, retried in place; wrap an error with Terminal to skip the
// retries. ctx is canceled when the message's partition is lost or when
// Close gives up; Attempt(ctx) tells which attempt this is. The handler
// must not acknowledge msg itself.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// Consumer consumes one or more JetStream pull consumers with messages of
// different keys handled in parallel and the messages of each key one at a
// time, in stream order.
//
// Create one with NewConsumer, start it with Run, stop it with Close. It
// never creates, updates or deletes JetStream consumers; it fetches from
// those it is given and acknowledges their messages. All methods are safe
// for concurrent use.
type Consumer struct {
	handler Handler
	cfg     *config
	parts   []*partition

	sched  *seqsched.Scheduler[sessionKey] // runs the messages, one session per key
	timers *seqsched.Scheduler[sessionKey] // runs retry backoffs, unbounded

	// life is the parent of every ctx given to user code: it carries the
	// callback mark Close looks for, and is canceled when Close gives up.
	life       context.Context
	cancelLife context.CancelFunc

	bal *balancer // WithBalance's membership; nil without it

	handlerTime histogram.Recorder
	queueTime   histogram.Recorder

	closingCh chan struct{} // closed when Close begins

	mu        sync.Mutex
	running   bool               // a Run is in progress
	stopRun   context.CancelFunc // ends that Run's fetches
	closing   bool               // Close has begun
	finishing bool               // a Close is finishing the close
	closed    chan struct{}      // closed when the close is finished
	handover  jetstream.JetStream
}

// sessionKey names a seqsched session: one per key of a JetStream
// consumer (part is its index in NewConsumer's slice).
type sessionKey struct {
	part int32
	key  string
}

// callbackMark is the ctx value that marks a ctx given to user code.
type callbackMark struct{}

// NewConsumer returns a Consumer of cons: one JetStream pull consumer, or
// several, such as one per partition of a partitioned stream. Each must
// have been looked up or created with nats.go's jetstream package (its
// CachedInfo is read) and use explicit acks. A consumer with the pinned
// client priority policy is consumed as a partition this instance may own
// (see the package doc); one without a priority policy as a plain
// consumer. h handles every message.
//
// It returns ErrNilHandler, ErrNoConsumers, or the errors.Join of an
// *OptionError for each bad option and a *ConsumerError for each consumer
// whose configuration cannot work: acks other than explicit, MaxAckPending
// unlimited or above WithMaxBuffered (the consumer would hold more than
// its bound, or stall), an AckWait or BackOff step too short to send
// InProgress in time, a priority policy other than pinned, a PinnedTTL
// not above the fetch expiry, a MaxRequestBatch below MaxAckPending or a
// MaxRequestExpires below the pull expiry (the server would refuse every
// pull), MaxDeliver 1 on a pinned consumer (a message its owner held when
// it died would never come back, and the next owner would run later
// messages of its key without it), the same consumer twice. NewConsumer
// makes no network call and starts no goroutine.
func NewConsumer(cons []jetstream.Consumer, h Handler, opts ...Option) (*Consumer, error) {
	if h == nil {
		return nil, ErrNilHandler
	}
	if len(cons) == 0 {
		return nil, ErrNoConsumers
	}
	cfg, cerr := newConfig(opts)
	if cerr != nil {
		// Report the consumers' problems too, against the defaults.
		cfg2, _ := newConfig(nil)
		_, perrs := newPartitions(cons, cfg2, nil)
		return nil, errors.Join(cerr, perrs)
	}
	c := &Consumer{
		handler:   intercept.Chain(h, cfg.interceptors),
		cfg:       cfg,
		closingCh: make(chan struct{}),
		closed:    make(chan struct{}),
		handover:  cmp.Or[jetstream.JetStream](cfg.handover, cfg.balanceJS),
	}
	parts, perrs := newPartitions(cons, cfg, c)
	if perrs != nil {
		return nil, perrs
	}
	c.parts = parts
	if cfg.balanceJS != nil {
		c.bal = newBalancer(cfg.balanceJS, cfg.balanceBucket, parts)
		if len(c.bal.parts) == 0 {
			return nil, &OptionError{Option: c.bal.opt, Reason: "no pinned consumer to share out"}
		}
	}
	c.life, c.cancelLife = context.WithCancel(context.WithValue(context.Background(), callbackMark{}, c))
	for _, p := range c.parts {
		if p.group == "" {
			p.startEpochLocked("") // a plain consumer is always owned
		}
	}
	var err error
	c.sched, err = seqsched.New[sessionKey](
		seqsched.WithMaxConcurrency(cfg.concurrency),
		seqsched.WithErrorHandler(ignoreTaskError),
	)
	if err != nil { // cannot happen: cfg.concurrency >= 1
		return nil, fmt.Errorf("seqjetstream: %w", err)
	}
	c.timers, err = seqsched.New[sessionKey](seqsched.WithErrorHandler(ignoreTaskError))
	if err != nil {
		return nil, fmt.Errorf("seqjetstream: %w", err)
	}
	return c, nil
}

// ignoreTaskError receives the failures of the consumer's own tasks: a
// task skipped because its partition was lost or Close gave up, or one
// that ended in runtime.Goexit after its message was taken care of. None
// needs reporting: the message's outcome is recorded where it happens.
func ignoreTaskError(context.Context, sessionKey, error) {}

// Run consumes until ctx ends or Close is called: for each JetStream
// consumer it keeps one pull request outstanding, sized to the room left
// under its bound, and hands each message to its key's session. It returns
// nil after Close began, ctx.Err() when ctx ended first (the consumer then
// stays usable: call Run again, or Close), ErrClosed when Close had begun
// before it was called, and ErrRunning while another Run is in progress.
// With WithBalance it first joins the membership bucket, before any pull
// (making the bucket if it is missing): it returns an *OptionError when
// the bucket's TTL is missing or above a pinned consumer's PinnedTTL;
// when membership is unavailable it logs why and pulls for every
// partition until it is back; on leaving it deletes this instance's key.
//
// Messages taken before Run returns keep running, and are kept from
// redelivery with InProgress, until they are done or Close gives them
// back. Run returns once its fetches have ended, which a key function that
// blocks can delay.
func (c *Consumer) Run(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	c.mu.Lock()
	switch {
	case c.closing:
		c.mu.Unlock()
		return ErrClosed
	case c.running:
		c.mu.Unlock()
		return ErrRunning
	}
	c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err // no pull started, none left on its way
	}
	c.mu.Lock()
	if c.closing || c.running {
		c.mu.Unlock()
		return c.Run(ctx) // changed meanwhile: report it
	}
	// The fetches run under a ctx of our own: the caller's ctx is only
	// watched, here, so none of its methods runs on a fetch goroutine.
	loops, stop := context.WithCancel(context.Background())
	c.running, c.stopRun = true, stop
	c.mu.Unlock()

	unwatch := context.AfterFunc(ctx, stop)
	var wg sync.WaitGroup
	if c.bal != nil {
		if err := c.bal.join(loops); err != nil {
			unwatch()
			stop()
			c.mu.Lock()
			c.running, c.stopRun = false, nil
			closing := c.closing
			c.mu.Unlock()
			switch {
			case closing:
				return nil
			case ctx.Err() != nil:
				return ctx.Err()
			}
			return err
		}
		wg.Add(1)
		go c.bal.loop(loops, c, &wg)
	}
	for _, p := range c.parts {
		wg.Add(1)
		go p.fetchLoop(loops, &wg)
	}
	wg.Wait()
	unwatch()
	stop()

	c.mu.Lock()
	c.running, c.stopRun = false, nil
	closing := c.closing
	c.mu.Unlock()
	if closing {
		return nil
	}
	return ctx.Err()
}

// Close stops the consumer in one call: it drains, and it gives up when
// ctx ends, as the core's Scheduler.Shutdown does (and as nats.go's Drain
// with a timeout does). It stops fetching, gives back at once (Nak) the
// messages that have not started and those waiting to retry, waits for
// running handlers to finish and acknowledges what succeeded, then
// returns nil. With WithHandover (or WithBalance), it first unpins the
// pinned consumers this instance owns, so that a standby takes them over
// at once (and catches up, keeping key order, while this one finishes); it
// waits at most a second for the server's answers, all partitions
// together, so a server that is down or slow costs Close no more than
// that.
//
// If ctx ends first, Close gives up, as the core's Scheduler.Close does at
// once: what is still held is given back, running handlers see their ctx
// canceled, and Close returns ctx.Err(). Either way no message is
// acknowledged, terminated or kept in progress after Close returns; a
// handler that finishes later is not acknowledged (JetStream redelivers
// its message).
//
// Called with the ctx of one of the consumer's callbacks (a handler,
// backoff, dead-letter or log handler), or one derived from it, Close
// begins the close and returns an error wrapping seqsched.ErrWouldDeadlock:
// it cannot wait for the callback's own message; call Close again from
// elsewhere to wait for the end. From such a callback with another ctx it
// waits for that message until ctx ends. From a key function it
// completes: Close never waits for a fetch goroutine. Close is safe to
// call more than once and concurrently: later calls wait for the first to
// finish and return nil (or ctx.Err()).
func (c *Consumer) Close(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	// The caller's ctx methods run before any state changes, so that one
	// that panics leaves the consumer as it was.
	ownCallback := ctx.Value(callbackMark{}) == c
	done := ctx.Done()
	c.begin()
	if ownCallback {
		return errWouldDeadlock
	}
	c.mu.Lock()
	if c.finishing {
		c.mu.Unlock()
		select {
		case <-c.closed:
			return nil
		case <-done:
			return ctx.Err()
		}
	}
	c.finishing = true
	c.mu.Unlock()
	gaveUp := c.finish(ctx, done)
	close(c.closed)
	if gaveUp {
		return ctx.Err()
	}
	return nil
}

// begin starts the close, once: fetches stop, messages that have not
// started or wait to retry are given back, and new deliveries are given
// back as they arrive. A message given back must never be overtaken by a
// later one of its key, so the queued ones go first.
func (c *Consumer) begin() {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	stop := c.stopRun
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	for _, p := range c.parts {
		p.beginClose()
	}
	// Only now wake the messages waiting to retry, which give themselves
	// back: their keys' queued messages are given back already, so none
	// can start once its predecessor is gone (and run before it on the
	// next owner).
	close(c.closingCh)
}

// finish waits for the held messages to be done, or for done, then closes
// every partition (no reply to the server after that), unpins the pinned
// ones (see unpinAll) and shuts the schedulers down. It reports whether it
// gave up at done.
func (c *Consumer) finish(ctx context.Context, done <-chan struct{}) (gaveUp bool) {
	for _, p := range c.parts {
		select {
		case <-p.drainedCh():
		case <-done:
			gaveUp = true
		}
		if gaveUp {
			break
		}
	}
	for _, p := range c.parts {
		p.close()
	}
	c.cancelLife() // handlers still running see their ctx canceled
	if c.handover != nil {
		// Even past ctx: a standby then takes over at once, not after
		// PinnedTTL; the unpins wait at most handoverWait.
		c.unpinAll(context.WithoutCancel(ctx))
	}
	sctx := ctx
	if gaveUp {
		sctx = c.life // done: the schedulers give up at once
	}
	if err := c.sched.Shutdown(sctx); err != nil {
		gaveUp = true
	}
	_ = c.timers.Shutdown(c.life) // its tasks end with their ctx
	return gaveUp
}

// Attempt returns which attempt of its message a handler's (or dead-letter
// function's) ctx belongs to: 1 for the first, and so on. It returns 0 for
// any other ctx.
func Attempt(ctx context.Context) int {
	if h, ok := ctx.Value(attemptKey{}).(*held); ok {
		return int(h.attemptNo.Load())
	}
	return 0
}

type attemptKey struct{}

// Sequence returns the stream sequence of the message a handler's (or
// dead-letter function's) ctx belongs to, as its metadata says, without
// parsing it. It returns 0 for any other ctx.
//
// Messages are delivered at least once, and a partition keeps each key's
// order across owners, so a handler that must not apply a message twice
// skips one at or below the last sequence it applied for its key.
func Sequence(ctx context.Context) uint64 {
	if h, ok := ctx.Value(attemptKey{}).(*held); ok {
		return h.seq
	}
	return 0
}

// Epoch returns, for the ctx of a handler (or dead-letter function) of a
// pinned consumer, the ownership epoch its message was delivered in: the
// consumer's delivery sequence of the first message the server delivered
// to this owner under its current pin. It returns 0 on a plain consumer
// and for any other ctx.
//
// The server numbers a consumer's deliveries in the order it makes them,
// and pins one client at a time, so an owner's epoch is higher than that
// of every owner before it, on whichever instance. That makes it a
// fencing token: an owner that stalled past its pin may still finish the
// handlers it was running after the next owner applied later messages of
// their keys (see the package doc); a store that remembers, per
// partition, the highest epoch it wrote under and refuses writes of a
// lower one refuses those. A consumer reset (ResetConsumerToSequence)
// starts the delivery sequence over, and the epochs with it: a store
// that fences must forget the partition's epoch then.
func Epoch(ctx context.Context) uint64 {
	if h, ok := ctx.Value(attemptKey{}).(*held); ok {
		return h.fence
	}
	return 0
}

// logAt writes one record through the consumer's logger, with ctx (which
// carries the callback mark) for a handler that wants it. The handler runs
// through call: a panic drops the record; a runtime.Goexit goes on up to
// the call site, whose goroutine's take-over carries the work on (see the
// design notes in doc.go).
func (c *Consumer) logAt(ctx context.Context, level slog.Level, msg string, args ...any) {
	l := c.cfg.logger
	_ = call(func() {
		if l.Enabled(ctx, level) {
			l.Log(ctx, level, msg, args...)
		}
	})
}

// now is the clock, read for queue times, handler durations and answer
// windows. Tests move it forward (clockSkew) to stand for a stall: time
// that passed while nothing ran.
func now() time.Time { return time.Now().Add(time.Duration(clockSkew.Load())) }

var clockSkew atomic.Int64
