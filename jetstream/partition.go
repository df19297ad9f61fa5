package jetstream

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// partition is the consumer's state for one JetStream consumer: a
// partition of a partitioned stream when the consumer is pinned, or a
// plain consumer. It is the unit of independence: its bound, its lock and
// its fetch goroutine are its own, so a stuck key stalls at most its own
// partition.
//
// Epochs. A plain consumer is owned for the consumer's whole life (one
// epoch). A pinned one is owned while this instance holds the server's pin:
// each pin gained starts an epoch, each pin lost ends it. A message belongs
// to the epoch it was delivered in; nothing is sent to the server for it
// once its epoch ended (lose) or the partition closed (close).
//
// Catch-up. When an epoch of a pinned consumer starts, the previous owner
// may have left messages unacknowledged; JetStream redelivers them after
// their AckWait, in no particular order, while it already delivers newer
// ones. So the epoch starts catching up: every message is held back, not
// run, until the server's count of unacknowledged messages is covered by
// the messages this instance holds (checkCatchUp). Then they are submitted
// in stream order, and per-key order holds across the hand-over.
//
// Lock order: gate, then mu. Neither is held while user code runs.
type partition struct {
	c      *Consumer
	idx    int32
	cons   jetstream.Consumer
	stream string
	name   string
	group  string        // the pinned priority group; "" for a plain consumer
	tick   time.Duration // InProgress interval: a third of the shortest redelivery wait
	expiry time.Duration // how long a pull request waits
	bound  int           // WithMaxBuffered

	// gate orders replies to the server against lose and close: every
	// Ack, Nak, Term and InProgress is sent under its read lock, after the
	// epoch and closed are checked; lose and close take the write lock, so
	// once they return no reply of the old epoch (or at all) goes out.
	gate sync.RWMutex

	mu       sync.Mutex
	epoch    uint64 // bumped when an epoch starts or ends
	owned    bool   // an epoch is in progress
	pin      string // the pin id of this epoch ("" for a plain consumer)
	ectx     context.Context
	ecancel  context.CancelFunc
	held     map[uint64]*held // by stream sequence: this epoch's messages not yet resolved
	catchUp  bool             // this epoch is catching up (see above)
	waiting  []*held          // held back while catching up
	resolved resolvedSet      // recently resolved, to recognise their redeliveries
	closing  bool             // Close has begun: deliveries are given back
	closed   bool             // Close has ended: nothing more is sent
	drained  chan struct{}    // made by drainedCh, closed once held is empty while closing
	hb       *time.Timer      // the InProgress timer, armed while messages are held
	hbArmed  bool
	hbStop   bool
	hbWG     sync.WaitGroup // the InProgress callback in flight, if any
	hbBuf    []jetstream.Msg

	// Fetch goroutine only (handed to its replacement after a Goexit).
	batch       jetstream.MessageBatch
	batchCancel context.CancelFunc
	keying      *delivery // the message whose key is being computed
	failures    int       // fetch errors in a row

	inflight atomic.Int32
	st       counters
}

// counters are a partition's running totals.
type counters struct {
	received, acked, duplicates, retries, termed, deadLettered atomic.Uint64
	givenBack, dropped, heartbeats                             atomic.Uint64
}

// delivery is a message as the fetch goroutine takes it (see take).
type delivery struct {
	msg   jetstream.Msg
	seq   uint64
	high  bool
	key   string
	stage uint8
}

// The stages of a delivery.
const (
	stageNew   uint8 = iota
	stageEpoch       // its epoch is settled; its key is next
	stageKey         // its key function runs
	stageKeyed       // its key is known
)

// held is a message of an epoch, from its delivery until it is resolved
// (acked, terminated, given back) or dropped with its epoch.
type held struct {
	p     *partition
	msg   jetstream.Msg
	seq   uint64
	key   sessionKey
	high  bool
	epoch uint64
	ctx   context.Context // the epoch's: the task's submit ctx
	at    time.Time       // delivered

	gone    bool // guarded by p.mu: nothing more is sent for it; its task does nothing
	started bool // guarded by p.mu: its task began

	attemptNo atomic.Int32 // for Attempt

	// The message task's own state (see process).
	next    step
	attempt int
	err     error // the last attempt's
	delay   time.Duration
	dlTries int
	dlErr   error
	dlDone  bool
}

const pinHeader = "Nats-Pin-Id"

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
		switch cc.PriorityPolicy {
		case jetstream.PriorityPolicyNone:
		case jetstream.PriorityPolicyPinned:
			if len(cc.PriorityGroups) == 0 {
				bad(s, n, "pinned priority policy without a priority group")
				ok = false
				break
			}
			p.group = cc.PriorityGroups[0]
			ttl := cc.PinnedTTL
			switch {
			case cfg.expirySet && cfg.fetchExpiry >= ttl:
				bad(s, n, "PinnedTTL %v not above WithFetchExpiry(%v): the pin would lapse between pulls", ttl, cfg.fetchExpiry)
				ok = false
			case !cfg.expirySet:
				p.expiry = max(min(cfg.fetchExpiry, ttl/2), 100*time.Millisecond)
			}
		default:
			bad(s, n, "PriorityPolicy %s not supported: use none (a plain consumer) or pinned (a partition)", policyName(cc.PriorityPolicy))
			ok = false
		}
		if ok && c != nil {
			p.held = make(map[uint64]*held)
			p.resolved.init(4 * cfg.buffered)
			parts = append(parts, p)
		}
	}
	if len(errs) > 0 {
		return nil, joinAll(errs)
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

func joinAll(errs []error) error {
	var err error
	for _, e := range errs {
		err = joinErrs(err, e)
	}
	return err
}

// startEpochLocked starts an epoch owned under pin. Called with gate
// write-locked and mu held (or before the consumer is shared).
func (p *partition) startEpochLocked(pin string) {
	p.epoch++
	p.owned, p.pin = true, pin
	p.ectx, p.ecancel = context.WithCancel(p.c.life)
	p.catchUp = p.group != ""
}

// followPin settles the epoch a delivery under pin belongs to: a pin
// other than this epoch's (or any, with no epoch) means the pin was lost
// and gained again since, so the epoch ends and a new one starts.
func (p *partition) followPin(pin string) {
	p.gate.Lock()
	p.mu.Lock()
	if p.closed || (p.owned && (pin == "" || pin == p.pin)) {
		p.mu.Unlock()
		p.gate.Unlock()
		return
	}
	dropped, cancel := p.endLocked()
	p.startEpochLocked(pin)
	p.mu.Unlock()
	p.gate.Unlock()
	p.afterEnd("pinned anew", dropped, cancel)
}

// lose ends the current epoch, if any: the pin is another client's now.
func (p *partition) lose(why string) {
	p.gate.Lock()
	p.mu.Lock()
	dropped, cancel := p.endLocked()
	p.mu.Unlock()
	p.gate.Unlock()
	p.afterEnd(why, dropped, cancel)
}

// endLocked ends the current epoch, if any: its messages are dropped,
// unacknowledged (the pin's new owner gets them again), and queued ones
// never run. It returns how many were dropped (-1: no epoch) and the
// cancel of the epoch's ctx, which afterEnd calls, so that running
// handlers see their ctx canceled. Called with gate write-locked and mu
// held.
func (p *partition) endLocked() (int, context.CancelFunc) {
	if !p.owned {
		return -1, nil
	}
	p.epoch++
	p.owned, p.pin = false, ""
	n := len(p.held)
	for _, h := range p.held {
		h.gone = true
	}
	clear(p.held)
	p.waiting, p.catchUp = nil, false
	p.checkDrainedLocked()
	return n, p.ecancel
}

// afterEnd finishes endLocked's work with no lock held; the log comes last,
// for a log handler may call runtime.Goexit.
func (p *partition) afterEnd(why string, dropped int, cancel context.CancelFunc) {
	if cancel == nil {
		return
	}
	cancel()
	p.st.dropped.Add(uint64(dropped))
	p.c.logAt(p.c.life, levelWarn, "seqsched/jetstream: partition lost; its messages are left to the pin's new owner",
		"stream", p.stream, "consumer", p.name, "reason", why, "dropped", dropped)
}

// dispatch takes a delivered message: a duplicate is answered or ignored,
// a new one held and, unless the epoch is catching up, submitted.
func (p *partition) dispatch(d *delivery) {
	var submit *held
	p.gate.RLock()
	p.mu.Lock()
	switch {
	case p.closed:
		// Nothing may be sent any more: JetStream redelivers it.
		p.st.dropped.Add(1)
	case p.closing || !p.owned:
		p.mu.Unlock()
		giveBack(d.msg)
		p.st.givenBack.Add(1)
		p.gate.RUnlock()
		return
	case p.held[d.seq] != nil:
		// Redelivered while held (an InProgress came late): the held copy
		// goes on; this one needs no answer.
		p.st.duplicates.Add(1)
	default:
		if termed, ok := p.resolved.get(d.seq); ok {
			// Resolved here before, and the answer was lost: answer again.
			p.mu.Unlock()
			if termed {
				_ = d.msg.Term()
			} else {
				_ = d.msg.Ack()
			}
			p.st.duplicates.Add(1)
			p.gate.RUnlock()
			return
		}
		h := &held{
			p: p, msg: d.msg, seq: d.seq, high: d.high,
			key:   sessionKey{part: p.idx, key: d.key},
			epoch: p.epoch, ctx: p.ectx, at: now(),
		}
		p.held[d.seq] = h
		p.armLocked()
		if p.catchUp {
			p.waiting = append(p.waiting, h)
		} else {
			submit = h
		}
	}
	p.mu.Unlock()
	p.gate.RUnlock()
	if submit != nil {
		p.submit(submit)
	}
}

// submit queues h's task on its key's session.
func (p *partition) submit(h *held) {
	prio := normal
	if h.high {
		prio = high
	}
	if err := p.c.sched.Post(h.ctx, h.key, h.run, prio); err != nil {
		// Only a scheduler that Close shut down refuses: give it back.
		p.resolve(h, replyNak)
	}
}

// reply is how a message is resolved.
type reply uint8

const (
	replyAck reply = iota
	replyTerm
	replyNak
)

// resolve sends h's answer to the server, unless h is gone (its epoch
// ended, or it was resolved already) or the partition closed. It reports
// whether the answer was sent.
func (p *partition) resolve(h *held, r reply) bool {
	p.gate.RLock()
	defer p.gate.RUnlock()
	p.mu.Lock()
	if h.gone || h.epoch != p.epoch || p.closed {
		p.mu.Unlock()
		return false
	}
	h.gone = true
	delete(p.held, h.seq)
	if r != replyNak {
		p.resolved.add(h.seq, r == replyTerm)
	}
	p.checkDrainedLocked()
	p.mu.Unlock()
	switch r {
	case replyAck:
		_ = h.msg.Ack()
		p.st.acked.Add(1)
	case replyTerm:
		_ = h.msg.TermWithReason(termReason(h))
		p.st.termed.Add(1)
		if h.dlDone {
			p.st.deadLettered.Add(1)
		}
	case replyNak:
		giveBack(h.msg)
		p.st.givenBack.Add(1)
	}
	return true
}

// termReason is the reason sent with a termination, for the server's
// advisory: the last attempt's error, cut to 200 bytes.
func termReason(h *held) string {
	s := fmt.Sprintf("seqsched: %d attempts: %v", h.attempt, h.err)
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// armLocked arms the InProgress timer when messages are held.
func (p *partition) armLocked() {
	if p.hbArmed || p.hbStop || len(p.held) == 0 {
		return
	}
	p.hbArmed = true
	p.hbWG.Add(1)
	if p.hb == nil {
		p.hb = time.AfterFunc(p.tick, p.beat)
	} else {
		p.hb.Reset(p.tick)
	}
}

// beat sends InProgress for every held message that has been held for
// more than half a tick, so that none reaches its AckWait while queued,
// running, retrying or held back by a catch-up. It runs on the timer's
// goroutine and calls no user code.
func (p *partition) beat() {
	defer p.hbWG.Done()
	p.gate.RLock()
	p.mu.Lock()
	p.hbArmed = false
	msgs := p.hbBuf[:0]
	if p.owned && !p.closed {
		cutoff := now().Add(-p.tick / 2)
		for _, h := range p.held {
			if h.at.Before(cutoff) {
				msgs = append(msgs, h.msg)
			}
		}
	}
	p.mu.Unlock()
	for _, m := range msgs {
		_ = m.InProgress()
	}
	p.st.heartbeats.Add(uint64(len(msgs)))
	p.gate.RUnlock()
	clear(msgs)
	p.mu.Lock()
	p.hbBuf = msgs[:0]
	p.armLocked()
	p.mu.Unlock()
}

// beginClose gives back, at once, the messages that have not started:
// queued ones and those held back by a catch-up.
func (p *partition) beginClose() {
	p.gate.RLock()
	defer p.gate.RUnlock()
	p.mu.Lock()
	p.closing = true
	var back []*held
	if !p.closed {
		for _, h := range p.held {
			if !h.started {
				h.gone = true
				delete(p.held, h.seq)
				back = append(back, h)
			}
		}
	}
	p.waiting, p.catchUp = nil, false
	p.checkDrainedLocked()
	p.mu.Unlock()
	slices.SortFunc(back, bySeq)
	for _, h := range back {
		giveBack(h.msg)
	}
	p.st.givenBack.Add(uint64(len(back)))
}

// giveBackDelay is how long a message given back waits on the server
// before its redelivery. Close gives messages back right after it ends
// its pulls, and the server forgets a pull only once the client's
// unsubscribe reaches it: a message redelivered at once could go to that
// dead pull, and come back only after its AckWait.
const giveBackDelay = 500 * time.Millisecond

// giveBack returns m to the server for redelivery (a Nak).
func giveBack(m jetstream.Msg) { _ = m.NakWithDelay(giveBackDelay) }

func bySeq(a, b *held) int { return cmp.Compare(a.seq, b.seq) }

// drainedCh returns a channel closed once no message is held (while
// closing).
func (p *partition) drainedCh() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drained == nil {
		p.drained = make(chan struct{})
		p.checkDrainedLocked()
	}
	return p.drained
}

func (p *partition) checkDrainedLocked() {
	if p.drained != nil && len(p.held) == 0 {
		select {
		case <-p.drained:
		default:
			close(p.drained)
		}
	}
}

// close ends the partition for good: what is still held is given back,
// the InProgress timer stops, and from then on nothing is sent.
func (p *partition) close() {
	p.gate.Lock()
	p.mu.Lock()
	p.closing = true
	var back []*held
	for _, h := range p.held {
		h.gone = true
		back = append(back, h)
	}
	clear(p.held)
	p.waiting, p.catchUp = nil, false
	p.hbStop = true
	if p.hbArmed && p.hb.Stop() {
		p.hbArmed = false
		p.hbWG.Done()
	}
	p.mu.Unlock()
	slices.SortFunc(back, bySeq)
	for _, h := range back {
		giveBack(h.msg)
	}
	p.st.givenBack.Add(uint64(len(back)))
	p.mu.Lock()
	p.closed = true
	p.checkDrainedLocked()
	cancel := p.ecancel
	p.mu.Unlock()
	p.gate.Unlock()
	if cancel != nil {
		cancel()
	}
	p.hbWG.Wait()
}

// unpin gives up this instance's pin, for a standby to take over at once.
func (p *partition) unpin(ctx context.Context, js jetstream.JetStream) {
	p.mu.Lock()
	owned := p.owned && p.group != ""
	p.mu.Unlock()
	if !owned {
		return
	}
	s, err := js.Stream(ctx, p.stream)
	if err != nil {
		return // the standby takes over after PinnedTTL instead
	}
	_ = s.UnpinConsumer(ctx, p.name, p.group)
}

// resolvedSet remembers the last resolved stream sequences of a partition
// (up to a fixed number, oldest forgotten first) and whether each was
// terminated, so that a redelivery of one whose answer was lost is
// answered again without running its handler. Its size does not depend
// on the number of keys.
type resolvedSet struct {
	ring  []uint64
	head  int             // oldest entry, once the ring is full
	kinds map[uint64]bool // sequence → terminated
}

func (r *resolvedSet) init(n int) {
	r.ring = make([]uint64, 0, n)
	r.kinds = make(map[uint64]bool, n)
}

func (r *resolvedSet) add(seq uint64, termed bool) {
	if _, ok := r.kinds[seq]; ok {
		r.kinds[seq] = termed
		return
	}
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, seq)
	} else {
		delete(r.kinds, r.ring[r.head])
		r.ring[r.head] = seq
		r.head = (r.head + 1) % len(r.ring)
	}
	r.kinds[seq] = termed
}

func (r *resolvedSet) get(seq uint64) (termed, ok bool) {
	termed, ok = r.kinds[seq]
	return termed, ok
}

func (r *resolvedSet) len() int { return len(r.kinds) }
