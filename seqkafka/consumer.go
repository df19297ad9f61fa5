package seqkafka

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/internal/histogram"
	"github.com/seqsched/seqsched/internal/intercept"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Handler handles one record. It runs on a goroutine of the consumer, never
// at the same time as another record of the same key (see the package doc),
// with a ctx that is canceled when the record's partition is lost, when a
// revocation's drain timeout passes, or when Close gives up; Attempt(ctx)
// tells the attempt. A nil error means the record is done; an error, a
// panic or runtime.Goexit is a failed attempt, retried unless the error is
// terminal (see Terminal).
type Handler func(ctx context.Context, r *kgo.Record) error

// Consumer consumes a Kafka consumer group's topics with records of
// different keys handled in parallel and records of one key in order.
//
// Create one with NewConsumer (or NewBatchConsumer), start it with Run,
// stop it with Close. The Consumer owns its kgo.Client: it creates it from
// the options given to NewConsumer and closes it in Close. All methods are
// safe for concurrent use, also from the consumer's own callbacks (see
// Close for the one rule there).
type Consumer struct {
	cl           *kgo.Client
	handler      Handler      // NewConsumer
	batchHandler BatchHandler // NewBatchConsumer
	cfg          *config
	chunk        int // the most records one poll takes (see window)

	sched   *seqsched.Scheduler[sessionKey] // runs the records, one session per key
	batches *seqsched.Scheduler[sessionKey] // runs the batches, one session each (NewBatchConsumer)
	timers  *seqsched.Scheduler[sessionKey] // runs backoff and linger waits, unbounded

	life       context.Context // parent of every partition's ctx; canceled when Close ends or gives up
	cancelLife context.CancelFunc

	mu     sync.Mutex
	parts  map[tp]*partition    // assigned partitions
	counts map[tp]*partCounters // every partition ever assigned, for Stats
	gen    uint64

	// commitMu serializes commits with revocations, so that a partition is
	// committed only while this member owns it (see commit). Lock order:
	// commitMu, mu, a partition's mu; fetchMu, mu, a partition's mu.
	// None is held while user code runs.
	commitMu  sync.Mutex
	metaLimit atomic.Int64 // the metadata bound, halved when a broker refuses

	fetchMu     sync.Mutex
	fetchPaused map[tp]bool   // partitions the client has paused at our request
	wake        chan struct{} // wakes a poll loop waiting for a partition that can take records

	pauseMu sync.Mutex
	resumed chan struct{} // while paused: closed by Resume
	paused  atomic.Bool

	runMu      sync.Mutex
	running    bool
	stopPoll   context.CancelFunc // ends the poll of a Run in progress
	runDone    chan struct{}      // closed when Run returns
	runBegun   func()             // tests only (export_test.go): called once a Run has begun
	closing    atomic.Bool
	closeOnce  sync.Once
	closedDown chan struct{} // closed when Close's work is done

	commits, commitErrors  atomic.Uint64
	handlerTime, queueTime histogram.Recorder
	epoch                  time.Time // see clock
}

// clock returns the time since the consumer was made: a monotonic clock
// read only, half the cost of time.Now, whose wall clock the durations in
// Stats do not need.
func (c *Consumer) clock() time.Duration { return time.Since(c.epoch) }

type tp struct {
	topic string
	part  int32
}

// sessionKey names a seqsched session: one per key of a partition's
// assignment. kind tells keyed records, unkeyed ones ordered per partition,
// unkeyed unordered ones (a session per offset), and batches (a session
// per batch, offset holding its number).
type sessionKey struct {
	topic  string
	part   int32
	gen    uint64
	kind   uint8
	key    string
	offset int64
}

const (
	kindKeyed   uint8 = iota
	kindLongKey       // a key longer than maxSessionKey, named by its SHA-256
	kindNoKey
	kindUnordered
	kindBatch
)

// maxSessionKey is the longest key a session is named by as it is; a
// longer one is named by its 32-byte SHA-256 (see sessionKeyOf).
const maxSessionKey = 64

// NewConsumer creates the consumer and its kgo.Client from clientOpts,
// which must name a consumer group (kgo.ConsumerGroup) and the topics
// (kgo.ConsumeTopics or kgo.ConsumeRegex). The consumer adds the options it
// relies on after clientOpts, overriding any given for the same purpose:
// kgo.DisableAutoCommit (so kgo.AutoCommitMarks and kgo.GreedyAutoCommit
// are dropped), kgo.BlockRebalanceOnPoll, kgo.OnPartitionsAssigned,
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
	if cfg.batchSet {
		return nil, &OptionError{Option: fmt.Sprintf("WithBatch(%d, %v)", cfg.batchSize, cfg.batchLinger), Reason: "only with NewBatchConsumer"}
	}
	return newConsumer(clientOpts, cfg, intercept.Chain(h, cfg.interceptors), nil)
}

// NewBatchConsumer is NewConsumer for a handler that takes records in
// batches, such as a bulk insert: every guarantee of the package holds, and
// a batch holds at most one record per key (the key's next record waits for
// the batch), so records of one key are still handled one at a time, in
// offset order. A batch holds records of one partition, up to WithBatch's
// size, and is handed to h once full or after WithBatch's linger;
// WithMaxConcurrency bounds the batch calls at once. Each record's outcome
// is h's error, or its entry in a *BatchError; a record that failed is
// retried alone, in a batch of one, after its backoff, and is dead-lettered
// alone. Stats counts a batch as one handler call. WithInterceptor is
// refused.
func NewBatchConsumer(clientOpts []kgo.Opt, h BatchHandler, opts ...Option) (*Consumer, error) {
	if h == nil {
		return nil, ErrNilHandler
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if len(cfg.interceptors) > 0 {
		return nil, &OptionError{Option: "WithInterceptor(f)", Reason: "only with NewConsumer: a batch call handles many records"}
	}
	return newConsumer(clientOpts, cfg, nil, h)
}

func newConsumer(clientOpts []kgo.Opt, cfg *config, h Handler, bh BatchHandler) (*Consumer, error) {
	c := &Consumer{
		handler:      h,
		batchHandler: bh,
		cfg:          cfg,
		chunk:        pollChunk(cfg.bufferHigh, cfg.bufferLow),
		parts:        make(map[tp]*partition),
		counts:       make(map[tp]*partCounters),
		fetchPaused:  make(map[tp]bool),
		wake:         make(chan struct{}, 1),
		epoch:        time.Now(),
		closedDown:   make(chan struct{}),
	}
	c.metaLimit.Store(int64(cfg.maxMetadata))
	c.life, c.cancelLife = context.WithCancel(context.Background())
	own := slices.DeleteFunc(slices.Clone(clientOpts), overridden)
	all := append(own,
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
		if probe, perr := kgo.NewClient(own...); perr == nil {
			ok := hasGroupAndTopics(probe)
			closeClient(probe)
			if !ok {
				return nil, ErrNoGroup
			}
		}
		return nil, fmt.Errorf("seqkafka: kgo.NewClient: %w", err)
	}
	if !hasGroupAndTopics(cl) {
		closeClient(cl)
		c.cancelLife()
		return nil, ErrNoGroup
	}
	c.cl = cl
	if err := c.newSchedulers(bh != nil); err != nil { // cannot happen: cfg.concurrency >= 1
		closeClient(cl)
		c.cancelLife()
		return nil, fmt.Errorf("seqkafka: %w", err)
	}
	return c, nil
}

// newSchedulers makes the schedulers that run the records (and batches)
// and the waits.
func (c *Consumer) newSchedulers(batches bool) error {
	var err error
	if c.sched, err = seqsched.New[sessionKey](seqsched.WithMaxConcurrency(c.cfg.concurrency)); err != nil {
		return err
	}
	if batches {
		if c.batches, err = seqsched.New[sessionKey](seqsched.WithMaxConcurrency(c.cfg.concurrency)); err != nil {
			return err
		}
	}
	c.timers, err = seqsched.New[sessionKey]()
	return err
}

// overridden reports whether o is a client option that kgo refuses beside
// kgo.DisableAutoCommit (kgo.AutoCommitMarks, kgo.GreedyAutoCommit). kgo's
// options are opaque, so ask kgo's own validation, which builds no client.
func overridden(o kgo.Opt) bool {
	err := kgo.ValidateOpts(o, kgo.ConsumerGroup("probe"), kgo.DisableAutoCommit())
	return err != nil && strings.HasPrefix(err.Error(), "cannot both disable autocommitting")
}

func hasGroupAndTopics(cl *kgo.Client) bool {
	group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	topics, _ := cl.OptValue(kgo.ConsumeTopics).(map[string]*regexp.Regexp)
	return group != "" && len(topics) > 0
}

// Client returns the consumer's client, for example to produce with it (as
// DeadLetterTopic does). Do not poll, commit, pause or close through it.
func (c *Consumer) Client() *kgo.Client { return c.cl }
