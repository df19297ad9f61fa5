package kafka

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/twmb/franz-go/pkg/kgo"
)

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
	c.processFrom(ctx, p, seq, sk, r, 1, nil)
}

// processFrom is process from attempt first on; last is the previous
// attempt's error. A handler or dead-letter function that calls
// runtime.Goexit (t.FailNow in a test, say) cannot be stopped from ending
// this goroutine, but the goroutine runs its deferred calls first: the
// deferred call counts that attempt as failed with ErrHandlerGoexit and
// carries on from the next one there, so the record is still finished on
// its key's session, in order, and never left undone.
func (c *Consumer) processFrom(ctx context.Context, p *partition, seq uint64, sk sessionKey, r *kgo.Record, first int, last error) {
	attempt, ended := first, false
	defer func() {
		if ended {
			return
		}
		if attempt > c.cfg.attempts {
			// The dead-letter function called Goexit: retrying it could
			// recurse without end, so the record is dropped, as the
			// default dead-letter function does, and logged.
			c.log.Error("seqsched/kafka: dead-letter function called runtime.Goexit; record dropped",
				"topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
			c.mu.Lock()
			c.completeLocked(p, seq, sk, true)
			c.mu.Unlock()
			return
		}
		c.log.Error("seqsched/kafka: handler called runtime.Goexit; counted as a failed attempt",
			"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "attempt", attempt)
		if attempt < c.cfg.attempts {
			c.retries.Add(1)
			if !c.sleep(ctx, sk, c.cfg.backoff(attempt)) {
				c.abandon(p, sk)
				return
			}
		}
		c.processFrom(ctx, p, seq, sk, r, attempt+1, ErrHandlerGoexit)
	}()
	err := last
	for ; ; attempt++ {
		if attempt <= c.cfg.attempts {
			if err = c.call(ctx, r); err == nil {
				c.processed.Add(1)
				break
			}
			if ctx.Err() != nil {
				ended = true
				c.abandon(p, sk)
				return
			}
			if attempt < c.cfg.attempts {
				c.retries.Add(1)
				if !c.sleep(ctx, sk, c.cfg.backoff(attempt)) {
					ended = true
					c.abandon(p, sk)
					return
				}
				continue
			}
		}
		attempt = c.cfg.attempts + 1 // from here on a Goexit is the dead-letter function's
		if !c.deadLetter(ctx, sk, r, err, c.cfg.attempts) {
			ended = true
			c.abandon(p, sk)
			return
		}
		c.deadLettered.Add(1)
		break
	}
	ended = true
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
