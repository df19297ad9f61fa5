package seqjetstream

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Balancing (WithBalance). Left alone, the server pins each partition to
// whichever instance pulls first, so one instance may own them all. With
// a membership bucket, every instance running the Consumer heartbeats its
// own key in a JetStream key-value bucket whose TTL (MaxAge) removes the
// key of an instance that stops; each heartbeat reads the bucket's keys,
// the members. Every instance computes the same assignment from them
// (assign): the pinned partitions, ordered by stream and name, go round
// the members, ordered by key, so no member has more than one partition
// above another. An instance pulls only for the partitions assigned to
// it; one that owns a partition assigned elsewhere steps down: it gives
// back what has not started, drops the rest (the epoch ends, as when a pin
// is lost) and unpins the partition, so that the assignee's pull is
// pinned at once, and catches up (key order holds across the move). While
// the views of the members differ, two instances may pull for one
// partition (the server pins one) or none (until the next heartbeat).
//
// An instance that dies stops heartbeating: its key goes after the
// bucket's TTL, and its partitions go to the others, whose pulls the
// server pins once the dead owner's pin lapses, PinnedTTL after its last
// pull. The TTL must therefore be at most every pinned consumer's
// PinnedTTL (checked by Run), so that a partition moves within PinnedTTL
// and the catch-up's AckWait, as without balancing.

// balancer is a Consumer's membership (see above). Its state is Run's:
// join and the heartbeat goroutine use it, one Run at a time.
type balancer struct {
	js     jetstream.JetStream
	bucket string
	id     string       // this instance's key in the bucket
	parts  []*partition // the pinned partitions, by stream and name
	kv     jetstream.KeyValue
	every  time.Duration // the heartbeat's period: a third of the bucket's TTL
	opt    string        // the option, as written, for errors
}

func newBalancer(js jetstream.JetStream, bucket string, parts []*partition) *balancer {
	b := &balancer{js: js, bucket: bucket, id: rand.Text(), opt: fmt.Sprintf("WithBalance(js, %q)", bucket)}
	for _, p := range parts {
		if p.group != "" {
			b.parts = append(b.parts, p)
		}
	}
	slices.SortFunc(b.parts, func(x, y *partition) int {
		return cmp.Or(cmp.Compare(x.stream, y.stream), cmp.Compare(x.name, y.name))
	})
	return b
}

// join binds the bucket, checks its TTL, makes this instance a member and
// assigns the partitions, before Run's first pull. Its errors wrap the
// server's, or ErrInvalidOption for a bucket whose TTL does not fit.
func (b *balancer) join(ctx context.Context) error {
	kv, err := b.js.KeyValue(ctx, b.bucket)
	if err != nil {
		return fmt.Errorf("seqjetstream: %s: %w", b.opt, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("seqjetstream: %s: %w", b.opt, err)
	}
	ttl := st.TTL()
	if ttl <= 0 {
		return &OptionError{Option: b.opt, Reason: "the bucket has no TTL: a dead instance would keep its partitions for ever"}
	}
	for _, p := range b.parts {
		if pttl := p.cons.CachedInfo().Config.PinnedTTL; ttl > pttl {
			return &OptionError{Option: b.opt, Reason: fmt.Sprintf("the bucket's TTL %v is above the PinnedTTL %v of consumer %s/%s: a dead instance's partition would move after the TTL, not the PinnedTTL", ttl, pttl, p.stream, p.name)}
		}
	}
	b.kv, b.every = kv, ttl/3
	return b.beat(ctx)
}

// loop heartbeats every b.every until ctx ends, then leaves the bucket.
// It is one of Run's goroutines.
func (b *balancer) loop(ctx context.Context, c *Consumer, wg *sync.WaitGroup) {
	defer wg.Done()
	t := time.NewTimer(b.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			b.leave()
			return
		case <-t.C:
		}
		bctx, cancel := context.WithTimeout(ctx, b.every)
		err := b.beat(bctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.logAt(c.life, levelWarn, "seqjetstream: membership heartbeat failed; keeping the last assignment",
				"bucket", b.bucket, "member", b.id, "err", err)
		}
		t.Reset(b.every)
	}
}

// beat renews this instance's key, reads the members and assigns the
// partitions.
func (b *balancer) beat(ctx context.Context) error {
	if _, err := b.kv.Put(ctx, b.id, nil); err != nil {
		return err
	}
	kl, err := b.kv.ListKeys(ctx)
	if err != nil {
		return err
	}
	var members []string
	for k := range kl.Keys() { // closed, and the lister stopped, once all are listed or ctx ends
		members = append(members, k)
	}
	if err := ctx.Err(); err != nil {
		return err // the list may be short
	}
	if !slices.Contains(members, b.id) {
		members = append(members, b.id) // a listing that missed the Put just made
	}
	for i, m := range assign(len(b.parts), members) {
		b.parts[i].setAssigned(m == b.id)
	}
	return nil
}

// leave deletes this instance's key, so that the others share out its
// partitions at their next heartbeat rather than after the TTL. It waits
// at most handoverWait.
func (b *balancer) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), handoverWait)
	defer cancel()
	_ = b.kv.Delete(ctx, b.id)
}

// assign returns the member each of n partitions (in their order) goes
// to: round the members in key order, so that no member gets more than
// one partition above another. members is sorted in place; duplicates
// count once.
func assign(n int, members []string) []string {
	slices.Sort(members)
	members = slices.Compact(members)
	out := make([]string, n)
	for i := range out {
		out[i] = members[i%len(members)]
	}
	return out
}

// setAssigned records whether the partition is assigned to this
// instance, and wakes its fetch goroutine on a change (see waitAssigned).
func (p *partition) setAssigned(a bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.assigned == a {
		return
	}
	p.assigned = a
	close(p.assignWake)
	p.assignWake = make(chan struct{})
}

// waitAssigned returns once the partition is assigned to this instance
// (true) or ctx ends (false). Meanwhile it does not pull: if it owns the
// partition, it steps down first. It runs on the fetch goroutine, between
// pulls.
func (p *partition) waitAssigned(ctx context.Context) bool {
	for {
		p.mu.Lock()
		assigned, wake, owned := p.assigned, p.assignWake, p.owned
		p.mu.Unlock()
		if assigned {
			return true
		}
		if owned {
			p.stepDown(ctx)
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
}

// stepDown hands the partition to its assignee: what has not started is
// given back (it comes back after giveBackDelay), the epoch ends (running
// handlers' answers are dropped, and those messages come back after their
// AckWait), and the partition is unpinned, so that the server pins the
// assignee's pull at once. The assignee catches up, keeping key order.
func (p *partition) stepDown(ctx context.Context) {
	p.gate.RLock()
	p.mu.Lock()
	back, late := p.answerableOnlyLocked(p.takeUnstartedLocked())
	p.mu.Unlock()
	p.giveBackAll(back, late)
	p.gate.RUnlock()
	p.lose("assigned to another instance (WithBalance)")
	uctx, cancel := context.WithTimeout(ctx, handoverWait)
	defer cancel()
	p.unpin(uctx, p.c.bal.js)
}
