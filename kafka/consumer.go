package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Handler handles one record. It runs on a goroutine of the consumer, never
// at the same time as another record of the same key (see the package doc),
// with a ctx that is canceled when the record's partition is lost, when a
// revocation's drain timeout passes, or when Close gives up. A nil error
// means the record is done; an error or a panic is a failed attempt.
type Handler func(ctx context.Context, r *kgo.Record) error

// Consumer consumes a Kafka consumer group's topics with records of
// different keys handled in parallel and records of one key in order.
//
// Create one with NewConsumer, start it with Run, stop it with Close. The
// Consumer owns its kgo.Client: it creates it from the options given to
// NewConsumer and closes it in Close. All methods are safe for concurrent
// use.
type Consumer struct {
	cl      *kgo.Client
	handler Handler
	cfg     *config
	log     *slog.Logger

	sched  *seqsched.Scheduler[sessionKey] // runs the records, one session per key
	timers *seqsched.Scheduler[sessionKey] // runs retry backoffs, unbounded

	life       context.Context // parent of every partition's ctx; canceled when Close gives up
	cancelLife context.CancelFunc

	mu       sync.Mutex
	parts    map[tp]*partition
	gen      uint64
	buffered int           // records fetched and not done, over all live partitions
	paused   map[tp]bool   // partitions this consumer paused
	wake     chan struct{} // signaled when buffered falls to the low mark
	waiting  bool          // the poll loop waits on wake

	// commitMu serializes commits with revocations, so that a partition is
	// committed only while this member owns it (see commit). Lock order:
	// commitMu before mu; neither is held while a handler runs.
	commitMu sync.Mutex

	runMu      sync.Mutex
	running    bool
	stopPoll   context.CancelFunc // ends the poll of a Run in progress
	runDone    chan struct{}      // closed when Run returns
	closing    atomic.Bool
	closeOnce  sync.Once
	closedDown chan struct{} // closed when Close's work is done

	processed    atomic.Uint64
	retries      atomic.Uint64
	deadLettered atomic.Uint64
	skippedTotal atomic.Uint64
	commits      atomic.Uint64
}

type tp struct {
	topic string
	part  int32
}

// sessionKey names a seqsched session: one per key of a partition's
// assignment. kind tells keyed records, unkeyed ones ordered per partition,
// and unkeyed unordered ones (a session per offset).
type sessionKey struct {
	topic  string
	part   int32
	gen    uint64
	kind   uint8
	key    string
	offset int64
}

const (
	kindKeyed uint8 = iota
	kindNoKey
	kindUnordered
)

// NewConsumer creates the consumer and its kgo.Client from clientOpts,
// which must name a consumer group (kgo.ConsumerGroup) and the topics
// (kgo.ConsumeTopics or kgo.ConsumeRegex). The consumer adds the options it
// relies on after clientOpts, overriding any given for the same purpose:
// kgo.DisableAutoCommit, kgo.BlockRebalanceOnPoll, kgo.OnPartitionsAssigned,
// kgo.OnPartitionsRevoked, kgo.OnPartitionsLost and kgo.OnOffsetsFetched.
//
// It returns ErrNilHandler for a nil h, ErrNoGroup when clientOpts lack a
// group or topics, an *OptionError (wrapping ErrInvalidOption) for each bad
// option, joined, or kgo's error for bad client options. The client joins
// the group at once (kgo's behaviour), but records are taken only while
// Run runs; the consumer itself starts no goroutine before Run.
func NewConsumer(clientOpts []kgo.Opt, h Handler, opts ...Option) (*Consumer, error) {
	if h == nil {
		return nil, ErrNilHandler
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		handler:    h,
		cfg:        cfg,
		log:        cfg.logger,
		parts:      make(map[tp]*partition),
		paused:     make(map[tp]bool),
		wake:       make(chan struct{}, 1),
		closedDown: make(chan struct{}),
	}
	if cfg.deadLetter == nil {
		cfg.deadLetter = c.logDeadLetter
	}
	c.life, c.cancelLife = context.WithCancel(context.Background())
	all := append(append([]kgo.Opt(nil), clientOpts...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.onAssigned),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onLost),
		kgo.OnOffsetsFetched(c.onOffsetsFetched),
	)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		c.cancelLife()
		// kgo rejects our group options when clientOpts name no group:
		// say that, rather than kgo's message about autocommit.
		if probe, perr := kgo.NewClient(clientOpts...); perr == nil {
			ok := hasGroupAndTopics(probe)
			probe.Close()
			if !ok {
				return nil, ErrNoGroup
			}
		}
		return nil, fmt.Errorf("seqsched/kafka: kgo.NewClient: %w", err)
	}
	if !hasGroupAndTopics(cl) {
		cl.Close()
		c.cancelLife()
		return nil, ErrNoGroup
	}
	c.cl = cl
	c.sched, err = seqsched.New[sessionKey](seqsched.WithMaxConcurrency(cfg.concurrency))
	if err != nil { // cannot happen: cfg.concurrency >= 1
		cl.Close()
		c.cancelLife()
		return nil, fmt.Errorf("seqsched/kafka: %w", err)
	}
	c.timers, _ = seqsched.New[sessionKey]()
	return c, nil
}

func hasGroupAndTopics(cl *kgo.Client) bool {
	group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	topics, _ := cl.OptValue(kgo.ConsumeTopics).(map[string]*regexp.Regexp)
	return group != "" && len(topics) > 0
}

// Client returns the consumer's client, for example to produce with it (as
// DeadLetterTopic does). Do not poll, commit, pause or close through it.
func (c *Consumer) Client() *kgo.Client { return c.cl }

// Run consumes until ctx ends or Close is called: it fetches records and
// submits each to its key's session, pausing fetches while the buffer is
// full, and commits done offsets every commit interval. It returns nil
// after Close, ctx.Err() when ctx ended (the consumer then stays usable:
// call Run again or Close), and ErrClosed when Close had begun before it was
// called. Only one Run may be in progress at a time; a second returns an
// error wrapping ErrInvalidOption.
func (c *Consumer) Run(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	c.runMu.Lock()
	if c.closing.Load() {
		c.runMu.Unlock()
		return ErrClosed
	}
	if c.running {
		c.runMu.Unlock()
		return fmt.Errorf("seqsched/kafka: Run already in progress: %w", ErrInvalidOption)
	}
	pollCtx, stop := context.WithCancel(ctx)
	c.running, c.stopPoll, c.runDone = true, stop, make(chan struct{})
	done := c.runDone
	c.runMu.Unlock()
	defer func() {
		stop()
		c.runMu.Lock()
		c.running = false
		close(done)
		c.runMu.Unlock()
	}()

	var wg sync.WaitGroup
	wg.Go(func() { c.commitLoop(pollCtx) })
	c.pollLoop(pollCtx)
	stop()
	wg.Wait()
	if c.closing.Load() {
		return nil
	}
	return ctx.Err()
}

// Close stops the consumer, like http.Server.Shutdown: it stops fetching,
// waits for the records taken to finish, commits, leaves the group and
// closes the client, then returns nil.
//
// If ctx ends first, Close gives up waiting: running handlers see their ctx
// canceled, queued records never start, what is done is committed (within
// the commit timeout), the group is left and the client closed, and Close
// returns ctx.Err(). Records not done are read again by the partitions'
// next owner. Close is safe to call more than once and concurrently; later
// calls wait for the first to finish and return nil (or ctx.Err()).
func (c *Consumer) Close(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	first := false
	var err error
	c.closeOnce.Do(func() {
		first = true
		err = c.close(ctx)
		close(c.closedDown)
	})
	if first {
		return err
	}
	select {
	case <-c.closedDown:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Consumer) close(ctx context.Context) error {
	c.runMu.Lock()
	c.closing.Store(true)
	stop, done := c.stopPoll, c.runDone
	c.runMu.Unlock()
	if done != nil {
		stop()
		<-done // the poll returns at once when its ctx ends
	}

	// Drain everything taken, as a revocation of every partition would,
	// with ctx as the drain's bound.
	c.mu.Lock()
	all := make(map[string][]int32)
	for k := range c.parts {
		all[k.topic] = append(all[k.topic], k.part)
	}
	c.mu.Unlock()
	c.revoke(ctx, all, time.Duration(1<<62))

	var err error
	if serr := c.sched.Shutdown(ctx); serr != nil {
		c.cancelLife()
		err = serr
	}
	c.cancelLife()
	// Records cut short by a forced shutdown still run their handler's
	// return path; timers end with their ctx.
	_ = c.timers.Shutdown(context.Background())
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.commitTimeout)
	defer cancel()
	if lerr := c.cl.LeaveGroupContext(lctx); lerr != nil && err == nil && !errors.Is(lerr, context.DeadlineExceeded) {
		c.log.Warn("seqsched/kafka: leave group", "err", lerr)
	}
	c.cl.Close()
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return err
}
