package seqjetstream

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A pinned partition's catch-up (see the partition type's comment): it
// begins when an epoch starts and again at a gap in the delivery
// sequence, asks the server for the consumer's info off the fetch
// goroutine, ends once the messages this instance holds cover the
// server's count of unacknowledged ones, and is given up after a bound.

// beginCatchUpLocked starts a catch-up (see type partition), or starts
// the one in progress over after another gap: a check asked before the
// gap may miss what was lost in it, so its answer is not taken (cuGen)
// and the next check is due at once. The time the catch-up began stays,
// for its bound (see giveUpDueLocked): the redeliveries of a message
// that nats.go drops make a gap every AckWait. Called with mu held.
func (p *partition) beginCatchUpLocked() {
	if !p.catchUp {
		p.cuSince, p.cuOverdue, p.cuSwallowed = time.Now(), time.Time{}, timedCount{}
		p.cuBegan, p.cuRestart = p.cuSince, 0
	}
	p.catchUp, p.cuNeed, p.cuD, p.cuMine = true, -1, 0, 0
	p.cuGen++
}

// catchUpLimit is how many of the longest redelivery waits (AckWait, or
// the longest BackOff step) a catch-up may last. Everything it waits for
// comes back within about two: a message lost on its way after one, one
// a previous owner of this package held after at most its answer window
// and one more wait.
const catchUpLimit = 4

// giveUpDueLocked reports whether a catch-up whose check, asked at
// asked, found messages missing is to be given up. Half way through its
// bound (cuLimit), a catch-up that still misses messages makes the
// partition pull singly (see pullSingly), so that nothing more can be
// lost on its way behind a status message; it is given up only once it
// has lasted cuLimit, has pulled singly for half of it, and an earlier
// check, asked at least a tick before, found messages missing past that
// too. What it misses then is out of every pull's reach (see
// giveUpLocked). The second check keeps an instance that was paused (or
// starved of CPU) during its catch-up from giving up for messages that
// were redelivered to it meanwhile and wait, not yet taken, in its
// connection. The bound counts real time, as the server's redeliveries
// do. Called with mu held, on the fetch goroutine.
func (p *partition) giveUpDueLocked(asked time.Time) bool {
	if p.repin {
		// Waiting to be pinned anew (see pinForgotten): another client
		// may be pinned meanwhile and hold what this catch-up waits for.
		// The bound counts from the new pin.
		p.cuSince, p.cuOverdue = asked, time.Time{}
		return false
	}
	if asked.Sub(p.cuSince) < p.cuLimit/2 {
		return false
	}
	p.pullSingly(asked)
	switch {
	case asked.Sub(p.cuSince) < p.cuLimit || asked.Sub(p.singleSince) < p.cuLimit/2:
		return false
	case p.cuOverdue.IsZero():
		p.cuOverdue = asked
		return false
	}
	return asked.Sub(p.cuOverdue) >= p.tick
}

// giveUpLocked ends a catch-up that waited cuLimit for more messages than
// ever came, when no more are missing than deliveries nats.go was seen to
// drop (see noteSwallowedLocked): the server counts short more
// unacknowledged messages than this instance holds, and they are stored
// status messages, which no client can receive (nats.go takes an empty
// message with a Status header for a control message and drops it: the
// server counts it delivered and redelivers it every AckWait, for ever or
// until MaxDeliver). Waiting longer would halt the partition, so the held
// messages run; a status message is never handled, so no key waits for
// it. The epoch remembers short as unreachable, and its later catch-ups
// (a redelivery of such a message that nats.go drops again shows as a
// gap) do not wait for them; the count shrinks when the server's does,
// and with a finite MaxDeliver it holds only until, as the evidence it
// rests on does (see statusCountedUntil). A catch-up that misses more
// starts over instead (see startOver). Called with mu held.
func (p *partition) giveUpLocked(short int, until time.Time) {
	u := &p.unreachable
	n := u.at(now())
	switch {
	case n == 0:
		u.until = until
	case !until.IsZero() && (u.until.IsZero() || until.Before(u.until)):
		u.until = until // the whole count holds while each part does
	}
	u.n = n + short
	p.st.catchUpsAbandoned.Add(1)
}

// provenUnreachableLocked counts one stored status message out of the
// epoch's reach, on pinForgotten's proof: the server delivered it to the
// pull made at pulled, and counts it unacknowledged. A proof covers one
// message, so a count of more (give-ups') keeps its own time. Called with
// mu held.
func (p *partition) provenUnreachableLocked(pulled time.Time) {
	if p.unreachable.at(now()) <= 1 {
		p.unreachable = timedCount{1, p.statusCountedUntil(pulled)}
	}
}

// statusCountedUntil returns until when a stored status message that the
// server delivered after evidence (a time at or before that delivery)
// surely stays in the server's count of unacknowledged messages; zero
// means for as long as it is stored. No client answers it (nats.go never
// hands it over), so it leaves the count only when the server gives it up
// at MaxDeliver: nats-server (v2.15, consumer.go, checkPending and
// hasMaxDeliveries) gives up a message at its last delivery once that
// delivery's AckWait (or BackOff step) has run out, and getNextMsg one
// past MaxDeliver only when it comes up for redelivery, later still.
// Neither can be sooner than the shortest redelivery wait after the
// delivery. Its delivery count is not known here (nats.go drops the
// message, metadata and all), so any delivery may be its last: the
// evidence holds one wait, and a catch-up whose check was answered later
// needs a new one (the next delivery of the message: another 423, or
// another gap). Counted past that, a status message given up while a
// real message of the partition was out let a later catch-up end with
// the real one still out, and run its key's later messages first (issue
// 45). Both clocks count, as in answerableLocked (see timedCount.at).
func (p *partition) statusCountedUntil(evidence time.Time) time.Time {
	if p.cons.CachedInfo().Config.MaxDeliver <= 0 {
		return time.Time{}
	}
	return evidence.Add(3 * p.tick) // the shortest redelivery wait, or a little less
}

// timedCount is a count of messages that evidence vouches for until
// until (see statusCountedUntil); a zero until vouches for as long as
// the count's scope lasts (a catch-up, or an epoch).
type timedCount struct {
	n     int
	until time.Time
}

// at is the count at t: n while its evidence holds, by the monotonic
// clock and by the wall clock both (the server's wait goes on while this
// host sleeps), else 0.
func (c timedCount) at(t time.Time) int {
	if c.until.IsZero() || (t.Before(c.until) && t.Round(0).Before(c.until.Round(0))) {
		return c.n
	}
	return 0
}

// noteDeliveryLocked follows a pinned epoch's deliveries by their consumer
// sequence: one that does not follow the last means deliveries were lost
// on their way, and the epoch catches up again (see type partition).
// It also notes the epoch's first first delivery (see resolvedLocked).
// Called with mu held, for every delivery the epoch takes, duplicates
// included.
func (p *partition) noteDeliveryLocked(h *held) {
	if p.group == "" {
		return
	}
	if p.lastDel == 0 {
		p.fence = h.del // the epoch's first delivery (see Epoch)
	}
	t := time.Now()
	if p.lastDel != 0 && h.del > p.lastDel+1 {
		// The lost deliveries are of messages below this one (first
		// deliveries come in stream order): the key rule no longer
		// covers them (see resolvedLocked), so a lost message that comes
		// back after later ones of its key ran, past a catch-up a stalled
		// previous owner's late answer ended early, runs rather than
		// being taken for a duplicate.
		p.own = 0
		p.beginCatchUpLocked()
		if p.sealed && !p.reconnectedSincePull() {
			// What was swallowed came after the last delivery, and so
			// after the pull that brought it was made.
			p.noteSwallowedLocked(int(h.del-p.lastDel-1), t.Sub(p.lastDelAt), p.lastDelPull)
		}
	}
	p.lastDel, p.lastDelAt, p.lastDelPull, p.sealed = h.del, t, h.anchor, p.deadOwe == 0
	if p.own == 0 && h.first {
		p.own = h.seq
	}
}

// Swallowed deliveries. nats.go drops a delivery it takes for a status
// message of the server (see status.go) without a word; the consumer's
// delivery sequence shows it as a gap. A gap also shows a delivery lost
// on its way, which is a real message that comes back after its AckWait:
// one sent to a pull that this instance ended (its backstop, on a host
// too loaded for the server's end to come in time; nats.go's own wait;
// a status that ended it early), or lost in a reconnect. A gap is
// evidence of swallowed status messages only when no such pull can have
// taken any of the deliveries it misses (sealed), for a catch-up that
// misses no more messages than that may run what it holds (see
// catchUpChecked), and a real message taken for a status message runs
// after later messages of its key.
//
// A pull the server ended (its count reached, or its expiry's 408, after
// every delivery it sent that pull) lost nothing on its way, and neither
// did one of one message that the server or a status ended (nothing can
// follow the one delivery it gets). A pull this instance ended is dead:
// the server may still hold its request, the more so on a loaded host
// whose requests reach it late, and shares what it delivers between it
// and the pulls sent after it, so that its losses fall between deliveries
// that this instance takes from those (issue 45). The server holds a
// request at most the wait it was asked for, counted from when it took
// it up, and it takes up one connection's requests in the order they were
// sent; so a dead pull's request is surely done once pulls sent after it
// have, one after the other, each been ended by the server at its expiry,
// for waits that add up to the dead pull's (deadOwe). A delivery taken
// after that comes from a pull sent after the dead one's last possible
// delivery, and a gap that follows it can hold none of the dead pull's.
// Until then no delivery seals, and a gap is not taken for swallowed
// deliveries: the catch-up that waits for them starts over instead of
// giving up, and they come again. (A stored empty message with a Status
// 408 header that ends a pull late looks like the server's 408; so it did
// before: that publisher's misuse is the one this evidence cannot tell
// apart.)
//
// A reconnect breaks the rule that a pull the server ended lost nothing:
// what was on the wire is lost, but the server keeps a waiting pull while
// its reply subject has interest (nats-server consumer.go, nextWaiting and
// processWaiting look at interest only when they run), and nats.go
// subscribes the pull's inbox again on the new connection; the server
// then delivers the rest to that pull and ends it at its expiry, with a
// 408 that reaches it. So a pull in flight across a reconnect is dead,
// from the first delivery it takes after the reconnect (see
// reconnectedSincePull): without it the gap its losses left read as
// swallowed deliveries, and a catch-up missing one real message gave up
// and ran its key's later messages first (issue 45). The package sees
// the reconnects of WithHandover's (or WithBalance's) JetStream's
// connection, as a rule the one the consumers were made from; without
// either, or with consumers on another connection, a reconnect's losses
// cannot be told from swallowed deliveries (see the README's Limits).
//
// The server redelivers a message at most once per redelivery
// wait, so of g swallowed deliveries over a span of k waits, at least
// ceil(g/(k+1)) are of distinct messages. With a finite MaxDeliver the
// server gives a stored status message up, an AckWait after its last
// delivery, and it leaves the count while a catch-up may still take a
// missing message for it: the evidence of a swallowed delivery, and the
// count of unreachable messages it grants, hold for one redelivery wait
// after it (see statusCountedUntil).

// pullEnd is how a pull ended, for noteSealed: it asked for n messages
// and got got of them, with err, early if before 8/10 of its expiry,
// took long after it was asked for. The server was asked to hold it for
// waitAtLeast or more, and at most its expiry. dead says that it may
// have lost deliveries on their way, whatever else says.
type pullEnd struct {
	n, got              int
	err                 error
	early, dead         bool
	took                time.Duration
	expiry, waitAtLeast time.Duration
}

// noteSealed records how a pull ended (see above). Called on the fetch
// goroutine.
func (p *partition) noteSealed(e pullEnd) {
	// A pull that ended with no error and short of its count, past 8/10
	// of its expiry, ended at the server's 408, or at nats.go's own wait
	// (its expiry and a second with no message), which the server does
	// not know of.
	expired := e.err == nil && e.got < e.n && !e.early
	byServer := expired && e.took < e.waitAtLeast+time.Second
	switch {
	case e.dead,
		// Ended from this side (the pull's backstop, or Run's end), not
		// by the server's word: a delivery may have been on its way.
		errors.Is(e.err, context.DeadlineExceeded) || errors.Is(e.err, context.Canceled),
		// Ended by a status (or a stored status message) while the
		// server may have more to send it.
		e.n > 1 && (e.err != nil || (e.early && e.got < e.n)),
		expired && !byServer:
		p.sealed = false
		p.deadOwe = max(p.deadOwe, e.expiry)
	case byServer:
		p.deadOwe = max(0, p.deadOwe-e.waitAtLeast)
	}
}

// reconnects returns how many times the connection of WithHandover's (or
// WithBalance's) JetStream has reconnected (see above); 0 without one.
func (p *partition) reconnects() uint64 {
	if js := p.c.handover; js != nil {
		if nc := js.Conn(); nc != nil {
			return nc.Stats().Reconnects
		}
	}
	return 0
}

// reconnectedSincePull reports whether that connection reconnected since
// the current pull was made, which is then dead (see above); it marks
// the pull so once it has. Called on the fetch goroutine.
func (p *partition) reconnectedSincePull() bool {
	if !p.pullReconnected && p.reconnects() != p.pullReconnects {
		p.pullReconnected = true
		p.sealed = false
		p.deadOwe = max(p.deadOwe, p.pullExpiry())
	}
	return p.pullReconnected
}

// noteSwallowedLocked counts g deliveries swallowed over span, after
// evidence (see above), for the catch-up in progress. With a finite
// MaxDeliver the count holds only for a while (see statusCountedUntil):
// the larger of the counts still holding, with its own time, is kept.
// Called with mu held.
func (p *partition) noteSwallowedLocked(g int, span time.Duration, evidence time.Time) {
	wait := 3 * p.tick // the shortest redelivery wait
	k := int(span / max(wait, time.Millisecond))
	if n := (g + k) / (k + 1); n >= p.cuSwallowed.at(now()) {
		p.cuSwallowed = timedCount{n, p.statusCountedUntil(evidence)}
	}
}

func (p *partition) catchingUp() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.catchUp
}

// catchUpDue reports whether the catch-up may be over, as far as the last
// check knew: none was made yet in this epoch, or the messages held now
// cover the count it found. It makes the check run as soon as it can
// succeed, not only once per pull.
func (p *partition) catchUpDue() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.catchUp && (p.cuNeed < 0 || p.cuMine >= p.cuNeed)
}

// A catch-up check asks the server for the consumer's info on a goroutine
// of its own, so that the fetch goroutine never waits for it: while it
// waited, it would send no pull (and the pin lapses PinnedTTL after the
// last one) and take no message (and a message not taken gets no
// InProgress, so the server redelivers it after its AckWait, to whoever
// holds the pin by then). The answer comes back to the fetch goroutine
// on p.checked, which holds at most one: one check is in flight at a
// time, and the goroutine, counted in Run's wait group, never blocks.

// checkResult is a catch-up check's answer, for the catch-up it was asked
// for: a later one (the epoch changed, or a delivery was lost since)
// needs a count taken after it began.
type checkResult struct {
	info  *jetstream.ConsumerInfo
	err   error
	quiet bool // err because Run ended: no log
	epoch uint64
	gen   uint64
	asked time.Time // when it was asked, by the real clock (see giveUpDue)
}

// checkCatchUp asks for a catch-up check, unless one is in flight: its
// answer is applied against the messages held when it comes, which
// covers whatever arrived meanwhile (see catchUpChecked).
func (p *partition) checkCatchUp(ctx context.Context) {
	if p.checking {
		return
	}
	p.mu.Lock()
	if !p.catchUp {
		p.mu.Unlock()
		return
	}
	epoch, gen := p.epoch, p.cuGen
	p.mu.Unlock()
	p.checking = true
	asked := time.Now()
	wg := p.runWG
	wg.Add(1)
	go func() {
		defer wg.Done()
		ictx, cancel := context.WithTimeout(ctx, max(p.expiry, time.Second))
		info, err := p.cons.Info(ictx)
		cancel()
		p.checked <- checkResult{info: info, err: err, quiet: ctx.Err() != nil, epoch: epoch, gen: gen, asked: asked}
	}()
}

// catchUpChecked ends the catch-up once every message the server counts
// as unacknowledged is one this instance holds: then none is still out
// with a previous owner or lost on its way, and the held messages run in
// stream order. Messages delivered after the server's count have a higher
// sequence than its Delivered.Stream and are not counted; those delivered
// before it and held now were unacknowledged when it was taken, and so
// were those this epoch resolved with an answer withheld (p.withheld),
// which are done here and wait for a redelivery to this instance to be
// answered (but for their last delivery under MaxDeliver, after which the
// server gives them up: see dispatch), as long as the server still
// counts them (see countWithheldLocked). The count relies on every held
// message being unacknowledged at the server, which only an answer that
// arrives after the message's AckWait ran out can break: this package's
// owners withhold those (answerableLocked), other clients may not (see
// the package doc). It runs on the fetch goroutine.
func (p *partition) catchUpChecked(ctx context.Context, r checkResult) {
	p.checking = false
	if r.err != nil {
		// The next delivery, or the pull's end, asks again.
		if !r.quiet {
			p.c.logAt(p.c.life, levelWarn, "seqjetstream: consumer info failed while catching up; retrying",
				"stream", p.stream, "consumer", p.name, "err", r.err)
		}
		return
	}
	info := r.info
	p.mu.Lock()
	if !p.catchUp {
		p.mu.Unlock()
		return
	}
	if r.epoch != p.epoch || r.gen != p.cuGen {
		// Taken before this catch-up began: it may miss what this one
		// waits for. Ask again, after it.
		p.mu.Unlock()
		p.checkCatchUp(ctx)
		return
	}
	for _, g := range info.PriorityGroups {
		if g.Group == p.group && g.PinnedClientID != "" && g.PinnedClientID != p.pin && !p.repin { // a repin is followRepin's
			p.mu.Unlock()
			p.lose("pinned to another client")
			return
		}
	}
	mine, t := 0, now()
	for seq, h := range p.held {
		if seq <= info.Delivered.Stream && seq > info.AckFloor.Stream && !p.givenUpLocked(h, t) {
			mine++
		}
	}
	mine += p.countWithheldLocked(info, r.asked)
	// Past its evidence, the server may have given them up (see
	// statusCountedUntil): wait for them, or for new evidence.
	unreachable := p.unreachable.at(t)
	if surplus := max(0, info.NumAckPending-mine); surplus < unreachable {
		unreachable, p.unreachable.n = surplus, surplus // some of them are gone from the server's count
	}
	need := info.NumAckPending - unreachable
	p.cuNeed, p.cuD, p.cuMine = need, info.Delivered.Stream, mine
	short, waited := 0, r.asked.Sub(p.cuSince)
	if need > mine {
		if p.repin && !p.repinDrain.IsZero() && !r.asked.Before(p.repinSince) {
			// A stored status message made nats.go forget the pin
			// while this catch-up misses more than it: those cannot
			// come to this instance until it is pinned anew, so the
			// drain cannot end: give back what is held and unpin now
			// (see pinForgotten).
			p.repinDrain, p.repinSince = time.Time{}, time.Now()
			epoch := p.epoch
			p.mu.Unlock()
			p.giveBackToRepin(epoch)
			p.unpinToRepin(ctx)
			return
		}
		if !p.giveUpDueLocked(r.asked) {
			p.mu.Unlock()
			return
		}
		if need-mine > p.cuSwallowed.at(t) { // past its evidence they may have left the server's count
			// Not all of what is missing can be stored status
			// messages: a real message may be out still, and running
			// what is held could run later messages of its key first.
			// Start over instead (see startOver).
			p.mu.Unlock()
			p.startOver(r.epoch, need-mine, r.asked.Sub(p.cuSince))
			return
		}
		short = need - mine
		p.giveUpLocked(short, p.cuSwallowed.until)
	}
	p.catchUp = false
	out := p.waiting
	p.waiting = nil
	p.mu.Unlock()
	sortBySeq(out)
	for _, h := range out {
		p.submit(h)
	}
	if short > 0 {
		p.c.logAt(p.c.life, levelError, "seqjetstream: catch-up given up: the server counts unacknowledged messages that never came to this instance, as many as the deliveries nats.go dropped (empty messages with a Status header, stored by a publisher); the held messages run now",
			"stream", p.stream, "consumer", p.name, "missing", short, "waited", waited, "released", len(out))
	}
}

// givenUpLocked reports whether the server may have given up held
// message h by t, and count it no more: its latest delivery was its last
// under MaxDeliver, and past its answer window it gets no InProgress, so
// its AckWait may have run out. Within the window, the InProgress it gets
// keeps it counted. Called with mu held.
func (p *partition) givenUpLocked(h *held, t time.Time) bool {
	return p.lastHeldDeliveryLocked(h) && !p.answerableLocked(h, t)
}

// countWithheldLocked counts, for a catch-up check the server answered
// with info when asked at asked, the messages done here with their answer
// withheld (p.withheld) that the server counted: they wait for a
// redelivery to this instance to be answered, and nowhere else can they
// be (the epoch would have ended). It leaves out, and forgets, those the
// server cannot count any more: at or below its ack floor, or not
// delivered again for two of the longest redelivery waits (see
// catchUpLimit) before the check, while the server redelivers what it
// counts at least once per wait, to this instance while it is pinned.
// Such a message left the count by an answer that reached the server
// after it had redelivered the message (another client's, or one of
// this owner's that was slow on its way), and counted it would end the
// catch-up while a real message is still out. Forgetting one too early
// costs time, not order: the catch-up waits for a message that it holds
// already, until its redelivery gets the answer. Called with mu held.
func (p *partition) countWithheldLocked(info *jetstream.ConsumerInfo, asked time.Time) int {
	stale := 2 * p.cuLimit / catchUpLimit
	n := 0
	for seq, at := range p.withheld {
		switch {
		case seq <= info.AckFloor.Stream || asked.Sub(at) > stale:
			delete(p.withheld, seq)
		case seq <= info.Delivered.Stream:
			n++
		}
	}
	return n
}

// startOver starts the bound of a catch-up of epoch over, after it waited
// its whole bound for messages that are not all stored status messages
// (see noteSwallowedLocked), without running anything: key order holds,
// and the partition waits. What it holds stays held, and counted as this
// instance's at its next checks: the server counts those messages
// unacknowledged still (they are above its ack floor, and only this
// instance answers for them while it holds the pin), so each of them is
// evidence the catch-up already has, and the catch-up ends as soon as
// the messages it misses have come once. The server redelivers a message
// it counts at least once per redelivery wait, so one that is still out
// comes, unless a client other than this package keeps it in progress.
// Those of the held messages still in their answer window are given back
// all the same (a Nak without delay), but for one whose latest delivery
// was its last under MaxDeliver (a Nak would make the server give it up
// and count it no more, while this catch-up counted it: see
// givenUpLocked), and kept: their redeliveries, as
// duplicates of held messages, show by the delivery sequence whatever
// nats.go swallowed since the last delivery (a stored status message's
// redelivery, see noteDeliveryLocked), which a catch-up that receives
// nothing more could not see, and so could never be given up for.
// (A held message that such a client answered late, past its AckWait, is
// counted as this instance's until the catch-up ends, as it was within
// one bound before: the package doc's assumption on answers.) The new
// bound begins with full pulls (see pullSize), for what the last one
// missed is likely waiting at the server behind the redeliveries of what
// is held; half way through it pulls singly again (see giveUpDueLocked).
//
// An earlier version gave back what it held (or, past its answer window,
// dropped it unanswered) and began again from nothing: each new bound
// then had to see every unacknowledged message come again, and on a host
// too loaded for its pulls (a pull of one message at a time after half a
// bound; deliveries that nats.go dropped when a pull ended from this
// side; the held messages' own redeliveries, while a stall kept their
// InProgress back, taking the pulls' turns) it never saw them all within
// one bound, and started over for ever (issue 45). Each start-over is
// counted (Stats.CatchUpsStartedOver) and logged with how many times this
// catch-up started over and how long the partition has waited: at Warn,
// and from the startOverErrorAt-th on at Error. Called on the fetch
// goroutine, with no lock held.
func (p *partition) startOver(epoch uint64, missing int, waited time.Duration) {
	p.gate.RLock()
	p.mu.Lock()
	if p.epoch != epoch || !p.owned || !p.catchUp || p.closing || p.closed {
		p.mu.Unlock()
		p.gate.RUnlock()
		return
	}
	p.cuSince, p.cuOverdue = time.Now(), time.Time{}
	p.cuNeed, p.cuMine = -1, 0
	p.cuGen++
	p.cuRestart++
	restarts, stalled := p.cuRestart, p.cuSince.Sub(p.cuBegan)
	t := now()
	var again []*held
	for _, h := range p.waiting {
		if p.answerableLocked(h, t) && !p.lastHeldDeliveryLocked(h) {
			again = append(again, h)
		}
	}
	held := len(p.waiting)
	p.mu.Unlock()
	sortBySeq(again)
	for _, h := range again {
		_ = h.msg.Nak()
	}
	p.gate.RUnlock()
	p.single = false
	p.st.catchUpsStartedOver.Add(1)
	attrs := []any{"stream", p.stream, "consumer", p.name, "missing", missing, "waited", waited, "held", held, "asked again", len(again),
		"restarts", restarts, "stalled", stalled}
	if restarts < startOverErrorAt {
		p.c.logAt(p.c.life, levelWarn, "seqjetstream: catch-up started over: the server counts unacknowledged messages that never came to this instance, and not all of them can be stored status messages; it goes on holding what it has until they come, then runs it in order", attrs...)
		return
	}
	p.c.logAt(p.c.life, levelError, "seqjetstream: catch-up started over again: a message the server counts as unacknowledged has been kept from this instance for several catch-up bounds (held in progress by a client other than this package, or its deliveries dropped by a starved process); the partition waits for it, in order",
		attrs...)
}

// startOverErrorAt is the start-over of one catch-up from which it is
// logged at Error. The first can follow one delivery that nats.go dropped
// on a loaded host, the second that delivery's redelivery dropped again;
// by the third the partition has waited three catch-up bounds (twelve
// redelivery waits) for a message that this package's owners, dead or
// alive, would have given back within one: an operator's matter.
const startOverErrorAt = 3
