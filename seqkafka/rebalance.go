package seqkafka

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *Consumer) newPartitionLocked(k tp) *partition {
	c.gen++
	counts := c.counts[k]
	if counts == nil {
		counts = new(partCounters)
		c.counts[k] = counts
	}
	p := newPartition(c.life, k, c.gen, counts, c.cfg.bufferHigh, c.cfg.bufferLow)
	c.parts[k] = p
	return p
}

// onAssigned records newly assigned partitions.
func (c *Consumer) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	var ks []tp
	c.mu.Lock()
	for t, parts := range assigned {
		for _, part := range parts {
			k := tp{t, part}
			if c.parts[k] == nil {
				c.newPartitionLocked(k)
				ks = append(ks, k)
			}
		}
	}
	c.mu.Unlock()
	if c.paused.Load() {
		c.syncFetch(ks)
	}
	c.wakePoll() // a new partition can take records
}

// onOffsetsFetched reads the commit metadata of newly assigned partitions:
// the done ranges above the committed offset are skipped when fetched, and
// kept in this owner's commits until then.
func (c *Consumer) onOffsetsFetched(ctx context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	var warnings [][]any
	each := func(topic string, part int32, offset int64, meta *string) {
		if offset < 0 {
			return
		}
		m := ""
		if meta != nil {
			m = *meta
		}
		var done []OffsetRange
		if m != "" {
			wm, ranges, err := decodeMetadata(m)
			if err == nil && wm != offset {
				err = fmt.Errorf("%w: metadata watermark %d, committed offset %d", ErrBadMetadata, wm, offset)
			}
			if err != nil {
				warnings = append(warnings, []any{"topic", topic, "partition", part, "offset", offset, "err", err})
			} else {
				done = ranges
			}
		}
		k := tp{topic, part}
		p := c.parts[k]
		if p == nil {
			p = c.newPartitionLocked(k)
		}
		p.mu.Lock()
		if p.offs.next < 0 { // else already consuming: the metadata is not about what comes next
			p.inherited = done
			p.committed, p.committedMeta = offset, m
		}
		p.mu.Unlock()
	}
	c.mu.Lock()
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
	c.mu.Unlock()
	for _, w := range warnings {
		c.log(ctx, slog.LevelWarn, "seqkafka: ignoring commit metadata; records above the committed offset will be replayed", w...)
	}
	return nil
}

// onRevoked stops taking records of the revoked partitions, waits up to
// the drain timeout for their records to finish, commits what is done, and
// forgets them; then the rebalance goes on.
func (c *Consumer) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.drainTimeout)
	defer cancel()
	failed, lost := c.revoke(ctx, revoked)
	if err := joinCommitErrors(failed, lost); err != nil {
		c.log(ctx, slog.LevelWarn, "seqkafka: commit of revoked partitions failed; their next owner replays what was done since the last commit", "err", err)
	}
}

// revoke gives up the revoked partitions: it stops taking their records,
// waits until their records are settled or ctx ends, cancels what is left,
// commits what is done and forgets them. Revoked partitions that another
// revocation is giving up already (Close's, and kgo's while Close runs)
// are that one's to commit, but revoke returns only once they are
// forgotten too, or ctx ends: kgo hands a partition on when its revocation
// callback returns, and the next owner must not run a key's record while
// this member still runs one. It returns the commit's errors (see commit).
func (c *Consumer) revoke(ctx context.Context, revoked map[string][]int32) (failed, lost *CommitError) {
	ps, others := c.stopTaking(revoked)
	if len(ps) > 0 {
		c.log(ctx, slog.LevelDebug, "seqkafka: draining revoked partitions", "partitions", len(ps))
		drain(ctx, ps)
		c.discardSessions(ctx, cancelLeftovers(ps))

		c.commitMu.Lock()
		failed, lost = c.commit(ps)
		c.forget(ps)
		c.commitMu.Unlock()
		c.syncFetch(keysOf(ps))
		c.wakePoll() // the partitions left may be all the poll waits for
	}
	if len(others) > 0 { // after its own: the other may be waiting for them
		c.log(ctx, slog.LevelDebug, "seqkafka: waiting for a revocation in progress of the same partitions", "partitions", len(others))
		waitForgotten(ctx, others)
	}
	return failed, lost
}

// stopTaking marks the revoked partitions revoking (the poll loop takes no
// more of their records, and records waiting out a Pause give up) and
// returns them, and those another revocation marked already (others).
func (c *Consumer) stopTaking(revoked map[string][]int32) (ps, others []*partition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, parts := range revoked {
		for _, part := range parts {
			p := c.parts[tp{t, part}]
			if p == nil {
				continue
			}
			p.mu.Lock()
			switch {
			case p.dead:
			case p.revoking:
				others = append(others, p)
			default:
				p.revoking = true
				p.win.forget()
				close(p.stop)
				if p.open > 0 {
					p.drained = make(chan struct{})
				}
				ps = append(ps, p)
			}
			p.mu.Unlock()
		}
	}
	return ps, others
}

// waitForgotten waits until each of ps is forgotten, or ctx ends.
func waitForgotten(ctx context.Context, ps []*partition) {
	for _, p := range ps {
		select {
		case <-p.gone:
		case <-ctx.Done():
			return
		}
	}
}

// drain waits until every record taken from ps is settled (or its
// partition forgotten: lost meanwhile), or ctx ends.
func drain(ctx context.Context, ps []*partition) {
	for _, p := range ps {
		p.mu.Lock()
		w := p.drained
		p.mu.Unlock()
		if w == nil {
			continue
		}
		select {
		case <-w:
		case <-ctx.Done():
			return
		}
	}
}

// cancelLeftovers cancels the ctx of the partitions with records still
// running (they see it; queued ones never start) and returns the sessions
// of those records.
func cancelLeftovers(ps []*partition) []sessionKey {
	var keys []sessionKey
	for _, p := range ps {
		p.mu.Lock()
		if p.open > 0 {
			p.cancel()
		}
		for sk := range p.keys {
			keys = append(keys, sk)
		}
		p.mu.Unlock()
	}
	return keys
}

// discardSessions discards the sessions whose records are not all settled:
// their queued records resolve without running (they stay not done, so no
// commit passes them, and their next owner replays them), and the running
// ones, whose ctx is canceled already, are waited for until ctx ends; the
// scheduler forgets each session once its running record returns.
// noWait is a ctx that is done already: Discard (and close) given it do
// their work at once and return without waiting for the handlers still
// running, which is what the core's API offers for "begin, don't wait".
var noWait = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (c *Consumer) discardSessions(ctx context.Context, keys []sessionKey) {
	for _, sk := range keys {
		_ = c.sched.Discard(ctx, sk) // nil, or ctx's error: the discarding is done either way
	}
}

// forget drops ps: settlements still to come change nothing, and the
// partitions are no longer assigned. A drain waiting for one of them (a
// revocation or Close that began before the group took it as lost) stops
// waiting: the settlements it waits for no longer count, so its drained
// would never close.
func (c *Consumer) forget(ps []*partition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		p.cancel()
		p.mu.Lock()
		if !p.dead {
			close(p.gone)
		}
		p.dead = true
		p.win.forget()
		if p.drained != nil {
			close(p.drained)
			p.drained = nil
		}
		p.mu.Unlock()
		if k := (tp{p.topic, p.part}); c.parts[k] == p {
			delete(c.parts, k)
		}
	}
}

// onLost drops the lost partitions' state without committing: another
// member may own them already.
func (c *Consumer) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	var ps []*partition
	c.mu.Lock()
	for t, parts := range lost {
		for _, part := range parts {
			if p := c.parts[tp{t, part}]; p != nil {
				ps = append(ps, p)
			}
		}
	}
	c.mu.Unlock()
	keys := cancelLeftovers(ps)
	c.forget(ps)
	c.discardSessions(noWait, keys) // another member may own them already: wait for nothing
	c.syncFetch(keysOf(ps))
	c.wakePoll()
}

func keysOf(ps []*partition) []tp {
	ks := make([]tp, len(ps))
	for i, p := range ps {
		ks[i] = tp{p.topic, p.part}
	}
	return ks
}
