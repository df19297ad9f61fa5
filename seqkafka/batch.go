package seqkafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BatchHandler handles a batch of records of one partition, at most one
// per key (see NewBatchConsumer). A nil error means every record is done;
// a *BatchError reports them one by one; any other error (or a panic, or
// runtime.Goexit) fails every record's attempt. The records of a batch are
// first attempts; a record that failed is retried alone, in a batch of
// one, after its backoff. Attempt(ctx) tells the attempt.
type BatchHandler func(ctx context.Context, rs []*kgo.Record) error

// A batch is records of one partition, at most one per key, handed to the
// BatchHandler in one call. Each record's job joins the partition's open
// batch (or, for a retry, makes a batch of its own) and awaits the batch's
// future, which lends the job's concurrency slot (see seqsched's
// Future.Await) so that a batch can hold more records than there are slots.
// The batch runs as a task of the batches scheduler, in a session of its
// own, so batch calls are bounded by WithMaxConcurrency like handler calls:
// it waits until it is full or its linger has passed, takes no more
// records, calls the handler, and leaves each record's outcome in errs
// before its future resolves.
type batch struct {
	c       *Consumer
	p       *partition
	sk      sessionKey
	attempt int                        // of every record in it
	jobs    []*job                     // guarded by p.mu until the batch runs
	full    chan struct{}              // closed once it is full; nil for a retry's batch of one
	f       *seqsched.Future[struct{}] // set before any job can read it (under p.mu)
	ran     bool                       // its task ran: errs holds every job's outcome
	errs    []error
}

// batchAttempt makes j's attempt in a batch and returns its outcome. It
// returns ok=false when ctx ended first, or the batch never ran (the
// consumer is closing): the record is then given back.
func (c *Consumer) batchAttempt(ctx context.Context, j *job) (outcome error, ok bool) {
	p := j.p
	p.mu.Lock()
	b, i := c.joinBatch(p, j)
	p.mu.Unlock()
	if b == nil {
		return nil, false
	}
	if _, err := b.f.Await(ctx); err != nil && ctx.Err() != nil {
		return nil, false
	}
	if !b.ran {
		return nil, false
	}
	return b.errs[i], true
}

// joinBatch adds j to p's open batch, starting one when there is none (or
// a batch of its own for a retry), and returns the batch and j's index in
// it, or nil when the batch could not start. Called with p.mu held.
func (c *Consumer) joinBatch(p *partition, j *job) (*batch, int) {
	if j.attempt > 1 {
		b := &batch{c: c, p: p, attempt: j.attempt, jobs: []*job{j}}
		if !c.startBatch(p, b) {
			return nil, 0
		}
		return b, 0
	}
	b := p.batch
	if b == nil {
		b = &batch{c: c, p: p, attempt: 1, full: make(chan struct{})}
		if !c.startBatch(p, b) {
			return nil, 0
		}
		p.batch = b
	}
	b.jobs = append(b.jobs, j)
	if len(b.jobs) >= c.cfg.batchSize {
		p.batch = nil
		close(b.full)
	}
	return b, len(b.jobs) - 1
}

// startBatch submits b's task. Called with p.mu held.
func (c *Consumer) startBatch(p *partition, b *batch) bool {
	p.batchSeq++
	b.sk = sessionKey{topic: p.topic, part: p.part, gen: p.gen, kind: kindBatch, offset: int64(p.batchSeq)}
	f, err := c.batches.Go(p.ctx, b.sk, b.run)
	if err != nil { // only ErrClosed: Close gave up
		return false
	}
	b.f = f
	return true
}

// run is the batch's task.
func (b *batch) run(ctx context.Context) error {
	c, p := b.c, b.p
	if b.full != nil && c.cfg.batchLinger > 0 {
		c.waitOn(ctx, b.sk, c.cfg.batchLinger, b.full)
	}
	p.mu.Lock()
	if p.batch == b {
		p.batch = nil // no more records join
	}
	jobs := b.jobs
	p.mu.Unlock()
	b.errs = make([]error, len(jobs))
	b.ran = true
	if err := ctx.Err(); err != nil {
		for i := range b.errs {
			b.errs[i] = err
		}
		return nil
	}
	rs := make([]*kgo.Record, len(jobs))
	start := c.clock()
	for i, j := range jobs {
		rs[i] = j.r
		if b.attempt == 1 {
			c.queueTime.Observe(start - j.taken)
		}
	}
	p.counts.inFlight.Add(int64(len(jobs)))
	var err error
	defer b.finish(&err, start) // also when the handler calls Goexit
	call(siteBatch, &err, func() error {
		return c.batchHandler(&callCtx{Context: ctx, c: c, attempt: b.attempt}, rs)
	})
	return nil
}

// finish gives each record its outcome from the handler's error.
func (b *batch) finish(err *error, start time.Duration) {
	b.p.counts.inFlight.Add(-int64(len(b.errs)))
	b.c.handlerTime.Observe(b.c.clock() - start)
	var be *BatchError
	if errors.As(*err, &be) {
		if len(be.Errs) == len(b.errs) {
			copy(b.errs, be.Errs)
			return
		}
		*err = fmt.Errorf("seqkafka: a BatchError of %d errors for a batch of %d records: %w", len(be.Errs), len(b.errs), *err)
	}
	for i := range b.errs {
		b.errs[i] = *err
	}
}
