package seqkafka

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/twmb/franz-go/pkg/kgo"
)

// pollLoop fetches and dispatches records until ctx ends.
func (c *Consumer) pollLoop(ctx context.Context) {
	for ctx.Err() == nil {
		if !c.waitResumed(ctx, nil) || !c.readyToPoll(ctx) {
			return
		}
		fetches := c.cl.PollRecords(ctx, c.chunk)
		if fetches.IsClientClosed() {
			return
		}
		c.dispatch(fetches)
		c.cl.AllowRebalance()
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				c.log(ctx, slog.LevelWarn, "seqkafka: fetch error", "topic", t, "partition", p, "err", err)
			}
		})
	}
}

// readyToPoll waits until some partition can take records (none is
// assigned, or one is not behind: see window), and stops fetching the
// partitions that are behind, so that the poll brings them nothing. It
// returns false when ctx ended first.
func (c *Consumer) readyToPoll(ctx context.Context) bool {
	for {
		hungry, behind := c.fetchState()
		if hungry {
			c.syncFetch(behind)
			return true
		}
		select {
		case <-c.wake:
		case <-ctx.Done():
			return false
		}
	}
}

// fetchState reports whether a poll may bring records that can be taken,
// and, if so, marks the partitions that are behind as stopped, returning
// them for syncFetch.
func (c *Consumer) fetchState() (hungry bool, stop []tp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.parts) == 0 {
		return true, nil // a poll is how new partitions' records come
	}
	for _, p := range c.parts {
		p.mu.Lock()
		if !p.win.behind() && !p.win.stopped {
			hungry = true
		}
		p.mu.Unlock()
	}
	if !hungry {
		return false, nil
	}
	for k, p := range c.parts {
		p.mu.Lock()
		if p.win.behind() && !p.win.stopped {
			p.win.stopped = true
			stop = append(stop, k)
		}
		p.mu.Unlock()
	}
	return true, stop
}

// wakePoll tells a poll loop waiting in readyToPoll to look again.
func (c *Consumer) wakePoll() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// dispatch takes the records of fetches.
func (c *Consumer) dispatch(fetches kgo.Fetches) {
	now := c.clock() // one clock read per poll: the records' queue time starts here
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) > 0 {
			c.take(c.partitionFor(tp{fp.Topic, fp.Partition}), fp.Records, fp.HighWatermark, now)
		}
	})
}

// partitionFor returns k's partition, taking it on as a fresh assignment
// when the client hands us records of one we were not told about, rather
// than dropping them.
func (c *Consumer) partitionFor(k tp) *partition {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.parts[k]; p != nil {
		return p
	}
	return c.newPartitionLocked(k)
}

// take queues rs, fetched from p, in p's window and submits what fits
// (admitLocked).
func (c *Consumer) take(p *partition, rs []*kgo.Record, hwm int64, now time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoking || p.dead {
		return // not ours any more; the next owner reads them again
	}
	p.hwm = hwm
	for _, r := range rs {
		if r.Offset < p.polled {
			continue // a redelivery
		}
		p.polled = r.Offset + 1
		p.win.wait(&job{c: c, p: p, r: r, taken: now})
	}
	c.admitLocked(p)
}

// admitLocked submits p's waiting records, in offset order, while its
// window has room: each is tracked as not done and posted to its key's
// session; records the commit metadata marked done are skipped. Called
// with p.mu held, by the poll loop and by jobs as they settle.
func (c *Consumer) admitLocked(p *partition) {
	if p.revoking || p.dead {
		return
	}
	for j := p.win.next(); j != nil; j = p.win.next() {
		r := j.r
		if !p.offs.advance(r.Offset) {
			continue
		}
		if p.inheritedDone(r.Offset) {
			p.counts.skipped.Add(1)
			continue
		}
		p.offs.add(r.Offset)
		p.win.take()
		p.open++
		j.sk = c.sessionKeyOf(p, r)
		p.keys[j.sk]++
		if err := c.sched.Post(p.ctx, j.sk, j.run, c.priorityOf(r)); err != nil {
			// Only ErrClosed is possible (Close gave up): the record stays
			// not done, so no commit passes it.
			p.open--
			p.releaseKey(j.sk)
		}
	}
}

// sessionKeyOf returns the session of r's key. A key longer than
// maxSessionKey bytes is named by its SHA-256 instead of its bytes (a kind
// of its own, so that it never meets a short key of the same bytes): the
// scheduler keeps idle sessions' keys after their records are done (its
// idle records), and a producer's keys may be as long as a record, so
// only this bounds what done records leave behind. Two long keys share a
// session only if their hashes collide, which would merely run them in one
// order.
func (c *Consumer) sessionKeyOf(p *partition, r *kgo.Record) sessionKey {
	sk := sessionKey{topic: p.topic, part: p.part, gen: p.gen}
	switch {
	case len(r.Key) > maxSessionKey:
		sum := sha256.Sum256(r.Key)
		sk.kind, sk.key = kindLongKey, string(sum[:])
	case r.Key != nil:
		sk.kind, sk.key = kindKeyed, string(r.Key)
	case c.cfg.unorderedNoKey:
		sk.kind, sk.offset = kindUnordered, r.Offset
	default:
		sk.kind = kindNoKey
	}
	return sk
}

// priorityOf is High for a record carrying WithPriorityHeader's header
// with the value "high", and Normal for every record without that option.
func (c *Consumer) priorityOf(r *kgo.Record) seqsched.Priority {
	if c.cfg.priorityHeader == "" {
		return seqsched.Normal
	}
	for _, h := range r.Headers {
		if h.Key == c.cfg.priorityHeader && strings.EqualFold(string(h.Value), "high") {
			return seqsched.High
		}
	}
	return seqsched.Normal
}

// syncFetch tells the client which of ks to fetch: an assigned partition
// is paused while its window stopped it or the consumer is paused, and
// every other is resumed. The wanted state is read afresh under fetchMu, so that
// calls racing from the poll loop, jobs, Pause and rebalances leave the
// client as the last state says, whatever order they reach it in. Lock
// order: fetchMu, then mu, then a partition's mu.
func (c *Consumer) syncFetch(ks []tp) {
	if len(ks) == 0 {
		return
	}
	c.fetchMu.Lock()
	defer c.fetchMu.Unlock()
	paused := c.paused.Load()
	var pause, resume map[string][]int32
	for _, k := range ks {
		c.mu.Lock()
		p := c.parts[k]
		c.mu.Unlock()
		want := false
		if p != nil {
			p.mu.Lock()
			want = (paused || p.win.stopped) && !p.dead
			p.mu.Unlock()
		}
		if want == c.fetchPaused[k] {
			continue
		}
		add := &resume
		if want {
			add = &pause
			c.fetchPaused[k] = true
		} else {
			delete(c.fetchPaused, k)
		}
		if *add == nil {
			*add = make(map[string][]int32)
		}
		(*add)[k.topic] = append((*add)[k.topic], k.part)
	}
	if len(pause) > 0 {
		c.cl.PauseFetchPartitions(pause)
	}
	if len(resume) > 0 {
		c.cl.ResumeFetchPartitions(resume)
	}
}

// Pause stops the consumer taking records, keeping its group membership:
// it stops fetching, and records already fetched do not start (nor do
// retries of records that failed) until Resume; handlers already running
// finish, and commits go on. Use it when what the handlers feed is down.
// A record waiting for Resume holds a concurrency slot; when its partition
// is revoked, or the consumer closed, it is given back not done, for the
// next owner. Stats reports the pause. Pause is safe to call at any time
// and any number of times; it returns at once.
func (c *Consumer) Pause() {
	c.pauseMu.Lock()
	if c.resumed == nil {
		c.resumed = make(chan struct{})
		c.paused.Store(true)
	}
	c.pauseMu.Unlock()
	c.syncFetch(c.assigned())
}

// Resume undoes Pause: fetching goes on, and the records held start.
// Resuming a consumer that is not paused does nothing.
func (c *Consumer) Resume() {
	c.pauseMu.Lock()
	if c.resumed != nil {
		close(c.resumed)
		c.resumed = nil
		c.paused.Store(false)
	}
	c.pauseMu.Unlock()
	c.syncFetch(c.assigned())
	c.wakePoll()
}

// waitResumed waits while the consumer is paused. It returns false when
// ctx ended first, or p (when not nil) began its revocation.
func (c *Consumer) waitResumed(ctx context.Context, p *partition) bool {
	if !c.paused.Load() {
		return true
	}
	c.pauseMu.Lock()
	ch := c.resumed
	c.pauseMu.Unlock()
	if ch == nil {
		return true
	}
	var stop chan struct{}
	if p != nil {
		stop = p.stop
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
	case <-stop:
	}
	return false
}

func (c *Consumer) assigned() []tp {
	c.mu.Lock()
	defer c.mu.Unlock()
	ks := make([]tp, 0, len(c.parts))
	for k := range c.parts {
		ks = append(ks, k)
	}
	return ks
}
