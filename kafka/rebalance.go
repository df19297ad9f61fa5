package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

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
