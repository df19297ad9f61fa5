package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

	commitMu sync.Mutex // serializes commits with revocations

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

// pollLoop fetches and dispatches records until ctx ends.
func (c *Consumer) pollLoop(ctx context.Context) {
	for ctx.Err() == nil {
		room := c.waitForRoom(ctx)
		if room <= 0 {
			continue
		}
		fetches := c.cl.PollRecords(ctx, room)
		if fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				c.log.Warn("seqsched/kafka: fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		c.mu.Lock()
		fetches.EachRecord(c.dispatchLocked)
		c.mu.Unlock()
		c.cl.AllowRebalance()
	}
}

// waitForRoom returns how many records the next poll may take. When the
// buffer has reached its high mark it pauses the assigned partitions and
// waits until it falls to the low mark (or ctx ends), then resumes them.
func (c *Consumer) waitForRoom(ctx context.Context) int {
	c.mu.Lock()
	if c.buffered < c.cfg.bufferHigh {
		room := c.cfg.bufferHigh - c.buffered
		c.mu.Unlock()
		return room
	}
	pause := make(map[string][]int32)
	for k := range c.parts {
		if !c.paused[k] {
			c.paused[k] = true
			pause[k.topic] = append(pause[k.topic], k.part)
		}
	}
	c.mu.Unlock()
	if len(pause) > 0 {
		c.cl.PauseFetchPartitions(pause)
	}
	for {
		c.mu.Lock()
		if c.buffered <= c.cfg.bufferLow || ctx.Err() != nil {
			c.waiting = false
			resume := c.unpauseAllLocked()
			c.mu.Unlock()
			if len(resume) > 0 {
				c.cl.ResumeFetchPartitions(resume)
			}
			return 0 // recompute the room on the next turn
		}
		c.waiting = true
		c.mu.Unlock()
		select {
		case <-c.wake:
		case <-ctx.Done():
		}
	}
}

func (c *Consumer) unpauseAllLocked() map[string][]int32 {
	resume := make(map[string][]int32)
	for k := range c.paused {
		resume[k.topic] = append(resume[k.topic], k.part)
	}
	clear(c.paused)
	return resume
}

// dispatchLocked tracks r and submits it to its key's session.
func (c *Consumer) dispatchLocked(r *kgo.Record) {
	k := tp{r.Topic, r.Partition}
	p := c.parts[k]
	if p == nil {
		// Records of a partition we were not told about: take them on as
		// a fresh assignment rather than drop them.
		p = c.newPartitionLocked(k)
	}
	if p.revoking || p.dead {
		return // not ours any more; the next owner reads it again
	}
	seq, ok := p.track(r.Offset)
	if !ok {
		return
	}
	c.buffered++
	if p.isSkipped(r.Offset) {
		p.skipped++
		c.skippedTotal.Add(1)
		c.completeLocked(p, seq, sessionKey{}, false)
		return
	}
	sk := sessionKey{topic: r.Topic, part: r.Partition, gen: p.gen}
	switch {
	case r.Key != nil:
		sk.kind, sk.key = kindKeyed, string(r.Key)
	case c.cfg.unorderedNoKey:
		sk.kind, sk.offset = kindUnordered, r.Offset
	default:
		sk.kind = kindNoKey
	}
	prio := seqsched.Normal
	for _, h := range r.Headers {
		if h.Key == c.cfg.priorityHeader && strings.EqualFold(string(h.Value), "high") {
			prio = seqsched.High
			break
		}
	}
	p.keys[sk]++
	_, err := c.sched.Go(p.ctx, sk, func(ctx context.Context) error {
		c.process(ctx, p, seq, sk, r)
		return nil
	}, prio)
	if err != nil {
		// Only ErrClosed is possible (Close gave up): the record stays not
		// done, so no commit passes it.
		p.keys[sk]--
		if p.keys[sk] == 0 {
			delete(p.keys, sk)
		}
	}
}

// process runs the handler for r until it succeeds, or dead-letters it
// after the last attempt, then marks it done. When ctx ends first (the
// partition was lost, its drain timed out, or Close gave up) the record is
// left not done, so no commit passes it.
func (c *Consumer) process(ctx context.Context, p *partition, seq uint64, sk sessionKey, r *kgo.Record) {
	var err error
	for attempt := 1; ; attempt++ {
		if err = c.call(ctx, r); err == nil {
			c.processed.Add(1)
			break
		}
		if ctx.Err() != nil {
			c.abandon(p, sk)
			return
		}
		if attempt < c.cfg.attempts {
			c.retries.Add(1)
			if !c.sleep(ctx, sk, c.cfg.backoff(attempt)) {
				c.abandon(p, sk)
				return
			}
			continue
		}
		if !c.deadLetter(ctx, sk, r, err, attempt) {
			c.abandon(p, sk)
			return
		}
		c.deadLettered.Add(1)
		break
	}
	c.mu.Lock()
	c.completeLocked(p, seq, sk, true)
	c.mu.Unlock()
}

// deadLetter hands r to the dead-letter handler until it accepts it. It
// returns false when ctx ended first.
func (c *Consumer) deadLetter(ctx context.Context, sk sessionKey, r *kgo.Record, cause error, attempt int) bool {
	for {
		err := c.callDeadLetter(ctx, r, cause)
		if err == nil {
			return true
		}
		c.log.Error("seqsched/kafka: dead-letter handler failed; will retry",
			"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		if ctx.Err() != nil || !c.sleep(ctx, sk, c.cfg.backoff(attempt)) {
			return false
		}
	}
}

func (c *Consumer) call(ctx context.Context, r *kgo.Record) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &HandlerPanicError{Value: v, Stack: stack()}
		}
	}()
	return c.handler(ctx, r)
}

func (c *Consumer) callDeadLetter(ctx context.Context, r *kgo.Record, cause error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &HandlerPanicError{Value: v, Stack: stack()}
		}
	}()
	return c.cfg.deadLetter(ctx, r, cause)
}

func (c *Consumer) logDeadLetter(_ context.Context, r *kgo.Record, err error) error {
	c.log.Error("seqsched/kafka: record failed every attempt; dropped",
		"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
	return nil
}

// sleep waits d before a retry, blocking only the record's key: the wait
// runs as a task of the unbounded timers scheduler and is awaited with the
// record's task ctx, so the record's concurrency slot is lent to other keys
// meanwhile (see seqsched.Future.Await). It returns false when ctx ended.
func (c *Consumer) sleep(ctx context.Context, sk sessionKey, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	f, err := c.timers.Go(ctx, sk, func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil {
		return false
	}
	_, err = f.Await(ctx)
	return err == nil && ctx.Err() == nil
}

// abandon forgets a record left not done because its ctx ended.
func (c *Consumer) abandon(p *partition, sk sessionKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseKeyLocked(p, sk)
}

func (c *Consumer) releaseKeyLocked(p *partition, sk sessionKey) {
	if n := p.keys[sk]; n > 1 {
		p.keys[sk] = n - 1
	} else {
		delete(p.keys, sk)
	}
}

// completeLocked marks record seq of p done.
func (c *Consumer) completeLocked(p *partition, seq uint64, sk sessionKey, keyed bool) {
	if keyed {
		c.releaseKeyLocked(p, sk)
	}
	if p.dead {
		return
	}
	p.complete(seq)
	c.buffered--
	if c.waiting && c.buffered <= c.cfg.bufferLow {
		c.waiting = false
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

func (c *Consumer) newPartitionLocked(k tp) *partition {
	c.gen++
	p := newPartition(c.life, k.topic, k.part, c.gen)
	c.parts[k] = p
	return p
}

// onAssigned records newly assigned partitions.
func (c *Consumer) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, ps := range assigned {
		for _, part := range ps {
			if c.parts[tp{t, part}] == nil {
				c.newPartitionLocked(tp{t, part})
			}
		}
	}
}

// onOffsetsFetched reads the commit metadata of newly assigned partitions:
// the done ranges above the committed offset are skipped when fetched.
func (c *Consumer) onOffsetsFetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	each := func(topic string, part int32, offset int64, meta *string) {
		if meta == nil || *meta == "" || offset < 0 {
			return
		}
		wm, done, err := decodeMetadata(*meta)
		if err == nil && wm != offset {
			err = fmt.Errorf("%w: metadata watermark %d, committed offset %d", ErrBadMetadata, wm, offset)
		}
		if err != nil {
			c.log.Warn("seqsched/kafka: ignoring commit metadata; records above the committed offset will be replayed",
				"topic", topic, "partition", part, "offset", offset, "err", err)
			return
		}
		p := c.parts[tp{topic, part}]
		if p == nil {
			p = c.newPartitionLocked(tp{topic, part})
		}
		if p.next >= 0 {
			return // already consuming: the metadata is not about what comes next
		}
		p.skip = done
		p.committed, p.committedMeta = offset, *meta
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			each(t.Topic, p.Partition, p.Offset, p.Metadata)
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				each(t.Topic, p.Partition, p.Offset, p.Metadata)
			}
		}
	}
	return nil
}

// onRevoked stops taking records of the revoked partitions, waits up to
// the drain timeout for their records to finish, removes their sessions,
// commits what is done, and forgets them; then the rebalance goes on.
func (c *Consumer) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	c.revoke(ctx, revoked, c.cfg.drainTimeout)
}

func (c *Consumer) revoke(ctx context.Context, revoked map[string][]int32, drain time.Duration) {
	c.mu.Lock()
	var ps []*partition
	var waits []chan struct{}
	for t, parts := range revoked {
		for _, part := range parts {
			p := c.parts[tp{t, part}]
			if p == nil || p.dead {
				continue
			}
			p.revoking = true
			ps = append(ps, p)
			if p.pending > 0 {
				if p.drained == nil {
					p.drained = make(chan struct{})
				}
				waits = append(waits, p.drained)
			}
		}
	}
	c.mu.Unlock()
	if len(ps) == 0 {
		return
	}
	c.log.Debug("seqsched/kafka: draining revoked partitions", "partitions", len(ps), "waiting", len(waits))

	timer := time.NewTimer(drain)
	defer timer.Stop()
wait:
	for _, w := range waits {
		select {
		case <-w:
		case <-timer.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	// Records still running past the drain see their ctx canceled; queued
	// ones never start. Their sessions are removed without waiting: a
	// reassignment gets a new gen, hence new sessions.
	c.mu.Lock()
	var keys []sessionKey
	for _, p := range ps {
		if p.pending > 0 {
			p.cancel()
		}
		for sk := range p.keys {
			keys = append(keys, sk)
		}
	}
	c.mu.Unlock()
	c.removeSessions(keys)

	c.commitMu.Lock()
	c.commit(ps)
	c.mu.Lock()
	resume := make(map[string][]int32)
	for _, p := range ps {
		p.cancel()
		c.dropLocked(p)
		k := tp{p.topic, p.part}
		if c.paused[k] {
			delete(c.paused, k)
			resume[p.topic] = append(resume[p.topic], p.part)
		}
	}
	c.mu.Unlock()
	c.commitMu.Unlock()
	if len(resume) > 0 {
		c.cl.ResumeFetchPartitions(resume)
	}
}

// removeSessions starts the removal of sessions whose records are not all
// done. Their records can no longer run (their ctx is canceled), so this
// only lets the scheduler forget them once they resolve.
func (c *Consumer) removeSessions(keys []sessionKey) {
	if len(keys) == 0 {
		return
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, sk := range keys {
		_ = c.sched.Remove(done, sk) // returns ctx.Err(); the drain goes on
	}
}

// onLost drops the lost partitions' state without committing: another
// member may own them already.
func (c *Consumer) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.mu.Lock()
	var keys []sessionKey
	resume := make(map[string][]int32)
	for t, parts := range lost {
		for _, part := range parts {
			k := tp{t, part}
			p := c.parts[k]
			if p == nil {
				continue
			}
			p.cancel()
			for sk := range p.keys {
				keys = append(keys, sk)
			}
			c.dropLocked(p)
			if c.paused[k] {
				delete(c.paused, k)
				resume[t] = append(resume[t], part)
			}
		}
	}
	c.mu.Unlock()
	c.removeSessions(keys)
	if len(resume) > 0 {
		c.cl.ResumeFetchPartitions(resume)
	}
}

// dropLocked forgets p: its records not done leave the buffer count, and
// completions still to come are ignored.
func (c *Consumer) dropLocked(p *partition) {
	if p.dead {
		return
	}
	p.dead = true
	c.buffered -= p.pending
	if c.parts[tp{p.topic, p.part}] == p {
		delete(c.parts, tp{p.topic, p.part})
	}
	if c.waiting && c.buffered <= c.cfg.bufferLow {
		c.waiting = false
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// commitLoop commits done offsets every commit interval until ctx ends.
func (c *Consumer) commitLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.commitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.commitMu.Lock()
			c.mu.Lock()
			ps := make([]*partition, 0, len(c.parts))
			for _, p := range c.parts {
				if !p.revoking && !p.dead {
					ps = append(ps, p)
				}
			}
			c.mu.Unlock()
			c.commit(ps)
			c.commitMu.Unlock()
		}
	}
}

// commit commits the watermark and done ranges of ps, where they changed
// since the last commit. The caller holds commitMu, so that no revocation
// runs meanwhile: a partition is committed only while this member owns it.
func (c *Consumer) commit(ps []*partition) {
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	metas := make(map[tp]string)
	type sent struct {
		p    *partition
		wm   int64
		meta string
	}
	var all []sent
	c.mu.Lock()
	for _, p := range ps {
		wm := p.watermark()
		if wm < 0 || p.dead {
			continue
		}
		meta := encodeMetadata(wm, p.doneAbove(), MaxMetadataBytes)
		if wm == p.committed && meta == p.committedMeta {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = make(map[int32]kgo.EpochOffset)
		}
		offsets[p.topic][p.part] = kgo.EpochOffset{Epoch: -1, Offset: wm}
		metas[tp{p.topic, p.part}] = meta
		all = append(all, sent{p, wm, meta})
	}
	c.mu.Unlock()
	if len(all) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.commitTimeout)
	defer cancel()
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			t := &req.Topics[i]
			for j := range t.Partitions {
				// Always set it: an empty string rather than kgo's default,
				// which the next owner would log as foreign.
				if m, ok := metas[tp{t.Topic, t.Partitions[j].Partition}]; ok {
					t.Partitions[j].Metadata = &m
				}
			}
		}
		return nil
	})
	var failed error
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			failed = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					failed = fmt.Errorf("topic %s partition %d: error code %d", t.Topic, p.Partition, p.ErrorCode)
				}
			}
		}
	})
	if failed != nil {
		c.log.Warn("seqsched/kafka: commit failed; will retry", "err", failed)
		return
	}
	c.commits.Add(1)
	c.mu.Lock()
	for _, s := range all {
		s.p.committed, s.p.committedMeta = s.wm, s.meta
	}
	c.mu.Unlock()
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
