package seqjetstream

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// newPartitions checks every consumer's configuration against cfg and,
// when c is not nil, returns their partitions. The error joins a
// *ConsumerError per problem.
func newPartitions(cons []jetstream.Consumer, cfg *config, c *Consumer) ([]*partition, error) {
	var errs []error
	var parts []*partition
	seen := make(map[string]bool)
	for i, cn := range cons {
		bad := func(stream, name, format string, args ...any) {
			errs = append(errs, &ConsumerError{Stream: stream, Consumer: name, Reason: fmt.Sprintf(format, args...)})
		}
		if cn == nil {
			bad("?", fmt.Sprintf("#%d", i), "nil consumer")
			continue
		}
		info := cn.CachedInfo()
		if info == nil {
			bad("?", fmt.Sprintf("#%d", i), "no cached info: look it up with Stream.Consumer or create it with CreateOrUpdateConsumer")
			continue
		}
		cc := info.Config
		s, n := info.Stream, info.Name
		p := &partition{c: c, idx: int32(i), cons: cn, stream: s, name: n, bound: cfg.buffered, expiry: cfg.fetchExpiry}
		ok := true
		if seen[s+"\x00"+n] {
			bad(s, n, "given twice")
			ok = false
		}
		seen[s+"\x00"+n] = true
		if cc.DeliverSubject != "" {
			bad(s, n, "a push consumer: use a pull consumer (no DeliverSubject)")
			ok = false
		}
		if cc.AckPolicy != jetstream.AckExplicitPolicy {
			bad(s, n, "AckPolicy %v: must be explicit, for each message is acknowledged once its handler returns", cc.AckPolicy)
			ok = false
		}
		switch {
		case cc.MaxAckPending < 1:
			bad(s, n, "MaxAckPending %d (unlimited): set it to at most WithMaxBuffered (%d), so that the server stops the flow at this instance's bound",
				cc.MaxAckPending, cfg.buffered)
			ok = false
		case cc.MaxAckPending > cfg.buffered:
			bad(s, n, "MaxAckPending %d above WithMaxBuffered(%d): lower MaxAckPending or raise the bound; above it this instance could not take what the server holds for it, and a takeover would stall",
				cc.MaxAckPending, cfg.buffered)
			ok = false
		}
		wait := cc.AckWait
		for _, b := range cc.BackOff {
			wait = min(wait, b)
		}
		if wait < 100*time.Millisecond {
			bad(s, n, "AckWait (or a BackOff step) of %v: must be >= 100ms, to send InProgress before it runs out", wait)
			ok = false
		}
		p.tick = wait / 3
		longest := cc.AckWait
		for _, b := range cc.BackOff {
			longest = max(longest, b)
		}
		p.cuLimit = catchUpLimit * longest
		p.beatEvery = p.tick
		switch cc.PriorityPolicy {
		case jetstream.PriorityPolicyNone:
		case jetstream.PriorityPolicyPinned:
			if len(cc.PriorityGroups) == 0 {
				bad(s, n, "pinned priority policy without a priority group")
				ok = false
				break
			}
			p.group = cc.PriorityGroups[0]
			if wait < 300*time.Millisecond {
				bad(s, n, "AckWait (or a BackOff step) of %v on a pinned consumer: must be >= 300ms, so that a pull (at least 100ms) fits in a third of it and each message arrives well within its answer window (see the package doc)", wait)
				ok = false
			}
			p.fresh = wait - p.tick/2
			p.beatEvery = p.tick / 2
			ttl := cc.PinnedTTL
			switch {
			case cfg.expirySet && cfg.fetchExpiry >= ttl:
				bad(s, n, "PinnedTTL %v not above WithFetchExpiry(%v): the pin would lapse between pulls", ttl, cfg.fetchExpiry)
				ok = false
			case !cfg.expirySet:
				// At most a tick, so that a message arrives with most of
				// its answer window still ahead (see answerableLocked).
				p.expiry = max(min(cfg.fetchExpiry, ttl/2, p.tick), 100*time.Millisecond)
				if exp := p.pullExpiry(); ttl <= exp {
					bad(s, n, "PinnedTTL %v not above the pull expiry %v (at least 100ms): the pin would lapse between pulls", ttl, exp)
					ok = false
				}
			}
			if cc.MaxDeliver == 1 {
				bad(s, n, "MaxDeliver 1 on a pinned consumer: a message its owner held when it died or lost the pin would never be redelivered, and the next owner's catch-up would run its key's later messages without it; use -1 (unlimited) or at least 2")
				ok = false
			}
		default:
			bad(s, n, "PriorityPolicy %s not supported: use none (a plain consumer) or pinned (a partition)", policyName(cc.PriorityPolicy))
			ok = false
		}
		// Each pull asks for up to MaxAckPending messages (see pullSize)
		// and waits the pull expiry: the server refuses (409) a pull above
		// either limit, and nothing would ever be consumed.
		if mrb := cc.MaxRequestBatch; mrb > 0 && cc.MaxAckPending > mrb {
			bad(s, n, "MaxRequestBatch %d below MaxAckPending %d: a pull asks for up to MaxAckPending messages and the server would refuse every one; raise MaxRequestBatch to at least MaxAckPending, or lower MaxAckPending",
				mrb, cc.MaxAckPending)
			ok = false
		}
		if mre, exp := cc.MaxRequestExpires, p.pullExpiry(); mre > 0 && mre < exp {
			what := fmt.Sprintf("the pull expiry %v", exp)
			if cfg.expirySet {
				what = fmt.Sprintf("WithFetchExpiry(%v)", cfg.fetchExpiry)
				if exp != cfg.fetchExpiry {
					what = fmt.Sprintf("the pull expiry %v (WithFetchExpiry(%v), capped on a pinned consumer)", exp, cfg.fetchExpiry)
				}
			}
			bad(s, n, "MaxRequestExpires %v below %s: the server would refuse every pull; raise MaxRequestExpires to at least the expiry, or lower WithFetchExpiry",
				mre, what)
			ok = false
		}
		p.maxPull = max(1, cc.MaxAckPending)
		if ok && c != nil {
			p.held = make(map[uint64]*held)
			p.assigned, p.assignWake = true, make(chan struct{})
			p.checked = make(chan checkResult, 1)
			p.resolved.init(4 * cfg.buffered)
			if p.group != "" {
				p.applied.init(4 * cfg.buffered)
			}
			parts = append(parts, p)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return parts, nil
}

func policyName(p jetstream.PriorityPolicy) string {
	switch p {
	case jetstream.PriorityPolicyOverflow:
		return "overflow"
	case jetstream.PriorityPolicyPrioritized:
		return "prioritized"
	}
	return fmt.Sprint(int(p))
}
