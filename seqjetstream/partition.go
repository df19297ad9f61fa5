package seqjetstream

import (
	"context"
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
// each pin gained starts an epoch, each pin lost ends it (but for the new
// pin that follows the unpin after a stored status message or pin header:
// see pinForgotten). A message belongs to the epoch it was delivered in;
// nothing is sent to the server for it once its epoch ended (lose) or the
// partition closed (close).
//
// Catch-up. When an epoch of a pinned consumer starts, the previous owner
// may have left messages unacknowledged; JetStream redelivers them after
// their AckWait, in no particular order, while it already delivers newer
// ones. So the epoch starts catching up: every message is held back, not
// run, until the server's count of unacknowledged messages is covered by
// the messages this instance holds (checkCatchUp). Then they are submitted
// in stream order, and per-key order holds across the hand-over.
//
// A pinned epoch also catches up again when a delivery of its own was
// lost on its way (a pull that ended while messages were in flight to it,
// a reconnect): the server redelivers such a message only after its
// AckWait, after the deliveries that followed it. Every delivery the
// server makes under the epoch's pin goes to this instance, one after the
// other in the consumer's delivery sequence, so a gap in that sequence
// tells of the loss (noteDeliveryLocked), and the deliveries from the gap
// on are held back until the lost ones are back. The messages submitted
// before the gap need not wait: the lost deliveries came after them, so
// they are later messages, or redeliveries of ones this epoch holds or
// resolved.
//
// Lock order: gate, then mu. Neither is held while user code runs.
type partition struct {
	c      *Consumer
	idx    int32
	cons   jetstream.Consumer
	stream string
	name   string
	group  string        // the pinned priority group; "" for a plain consumer
	tick   time.Duration // a third of the shortest redelivery wait: InProgress goes out every tick or sooner
	// beatEvery is the InProgress timer's period: a tick, or half of one on
	// a pinned consumer, whose answer windows leave less room (see beat).
	beatEvery time.Duration
	// fresh is, on a pinned consumer, how long after its anchor a held
	// message may still be answered: the shortest redelivery wait less
	// half a tick, the answer's allowance for its way to the server (see
	// answerableLocked).
	fresh time.Duration
	// cuLimit is how long a catch-up may wait before it is given up
	// (see giveUpLocked): catchUpLimit times the longest redelivery wait.
	cuLimit time.Duration
	expiry  time.Duration // WithFetchExpiry, or on a pinned consumer its default (see pullExpiry)
	bound   int           // WithMaxBuffered
	maxPull int           // the consumer's MaxAckPending: no pull asks for more

	// gate orders replies to the server against lose and close: every
	// Ack, Nak, Term and InProgress is sent under its read lock, after the
	// epoch and closed are checked; lose and close take the write lock, so
	// once they return no reply of the old epoch (or at all) goes out.
	gate sync.RWMutex

	mu        sync.Mutex
	epoch     uint64 // bumped when an epoch starts or ends
	owned     bool   // an epoch is in progress
	pin       string // the pin id of this epoch ("" for a plain consumer)
	ectx      context.Context
	ecancel   context.CancelFunc
	held      map[uint64]*held // by stream sequence: this epoch's messages not yet resolved
	catchUp   bool             // this epoch is catching up (see above)
	cuNeed    int              // catching up: the server's unacknowledged count at the last check; -1 before one
	cuD       uint64           // catching up: the server's last delivered sequence at that check
	cuMine    int              // catching up: held messages at or below cuD
	cuGen     uint64           // bumped when a catch-up begins, to tell its checks from older ones
	cuSince   time.Time        // catching up: when it began, or last started over (see startOver), by the real clock
	cuBegan   time.Time        // catching up: when it began; a start-over keeps it
	cuRestart int              // catching up: how many times it started over
	cuOverdue time.Time        // catching up: when the first check past cuLimit that found messages missing was asked; zero before
	// cuSwallowed is, while catching up, the most deliveries to this
	// instance that nats.go was seen to swallow (see noteDeliveryLocked)
	// that must have been of distinct messages: a lower bound on the
	// stored status messages among the missing. lastDelAt is when the
	// epoch's last delivery was taken, by the real clock, and lastDelPull
	// its anchor (when its pull was made, by the package's clock).
	// With a finite MaxDeliver, cuSwallowed and unreachable (below) hold
	// only for a while: the server may give those messages up (see
	// timedCount).
	cuSwallowed timedCount
	lastDelAt   time.Time
	lastDelPull time.Time
	// unreachable is, in this epoch, how many of the messages the server
	// counts as unacknowledged are stored status messages out of its
	// reach: found by an abandoned catch-up that they never came (see
	// giveUpLocked), or proved by a 423 (see pinForgotten); later
	// catch-ups do not wait for them.
	unreachable timedCount
	fence       uint64        // pinned: the consumer sequence of this epoch's latest first delivery under a new pin (see Epoch)
	lastDel     uint64        // pinned: this epoch's last delivery, by consumer sequence; 0 before its first
	own         uint64        // pinned: the stream sequence of this epoch's first first delivery; 0 before it (see resolvedLocked)
	lastFirst   uint64        // the stream sequence of the latest first delivery (see noteReplayLocked)
	waiting     []*held       // held back while catching up
	resolved    resolvedSet   // recently resolved, to recognise their redeliveries
	applied     appliedKeys   // pinned: per key, the highest resolved in this epoch (see resolved.go)
	closing     bool          // Close has begun: deliveries are given back
	closed      bool          // Close has ended: nothing more is sent
	drained     chan struct{} // made by drainedCh, closed once held is empty while closing
	idle        chan struct{} // made by a step-down (WithBalance), closed once held is empty
	hb          *time.Timer   // the InProgress timer, armed while messages are held
	hbArmed     bool
	hbStop      bool
	hbWG        sync.WaitGroup // the InProgress callback in flight, if any
	hbBuf       []beatItem
	// skipProgress, set by tests only, makes beat send no InProgress for
	// the sequences it names, as if it came too late for them.
	skipProgress func(seq uint64) bool

	// Fetch goroutine only (handed to its replacement after a Goexit).
	// sealed is false once a pull that may have lost a delivery on its
	// way ended since the last delivery taken, or when that delivery was
	// taken while such a pull's request may still have been held by the
	// server; deadOwe is how much more of the server's waits, of pulls it
	// ended at their expiry, that takes (see noteSealed).
	sealed      bool
	deadOwe     time.Duration
	batch       jetstream.MessageBatch
	batchCancel context.CancelFunc
	keying      *held            // the message being taken (see take)
	pullAt      time.Time        // when the current pull request was made: before the server got it
	failures    int              // fetch errors in a row
	forgedPin   bool             // the last delivery's first pin header was a stored one (see pinOf)
	withPin     bool             // nats.go holds a pin for the consumer: one came with a delivery since its last 423
	pullPinned  bool             // the current pull carried a pin when sent, or the server gave it one (a delivery under a pin came)
	runWG       *sync.WaitGroup  // Run's, which waits for the catch-up checks too
	checking    bool             // a catch-up check is in flight (see checkCatchUp)
	checked     chan checkResult // its answer; room for one
	// single makes every pull ask for one message (see pullSingly),
	// since singleSince, by the real clock.
	single      bool
	singleSince time.Time

	// pullReconnects is reconnects() when the current pull was made, and
	// pullReconnected says that it has changed since (see
	// reconnectedSincePull). Fetch goroutine only.
	pullReconnects  uint64
	pullReconnected bool

	// repin is set while the epoch waits to be pinned anew after a stored
	// status message made nats.go forget its pin (see pinForgotten);
	// repinSince is when it began, or when the unpin was sent after a
	// drain (see followRepin). repinDrain, when set, is until when the
	// unpin waits for the epoch's held messages to be done first.
	// Guarded by mu.
	repin      bool
	repinSince time.Time
	repinDrain time.Time
	// repinEnds, when set with repin, ends the epoch once the drain is
	// over, instead of unpinning: a stored status message made nats.go
	// forget the pin, and there is no JetStream to unpin with.
	repinEnds bool
	// withheld are, on a pinned consumer, the stream sequences this epoch
	// resolved with an answer withheld (see answerableLocked) whose
	// redelivery has not been answered yet: the server counts them
	// unacknowledged, though they are done (see catchUpChecked). Each
	// maps to when it was withheld or last delivered again, by the real
	// clock: one the server has not redelivered for a while may have left
	// its count (see countWithheldLocked). Guarded by mu.
	withheld map[uint64]time.Time

	// assigned is false while WithBalance assigns the partition to another
	// instance: the fetch goroutine does not pull then (see waitAssigned).
	// assignWake is closed, and replaced, at each change. Guarded by mu.
	assigned   bool
	assignWake chan struct{}

	// Silence (see silence.go); fetch goroutine only. lookAt is when a
	// silent partition is next looked at, silenceWait the wait before
	// that; suspect is set when the server held messages for this
	// instance at the last look, and had delivered suspectDel by then;
	// silenceLogged, once the silence that cannot be ended was logged.
	lookAt        time.Time
	silenceWait   time.Duration
	suspect       bool
	suspectDel    uint64
	silenceLogged bool

	unpinning atomic.Bool // an unpin of unpinToRepin is in flight
	inflight  atomic.Int32
	st        counters
}

// counters are a partition's running totals.
type counters struct {
	received, acked, duplicates, retries, termed, deadLettered atomic.Uint64
	givenBack, dropped, heartbeats, catchUpsAbandoned          atomic.Uint64
	catchUpsStartedOver                                        atomic.Uint64
}

// The stages of a message as the fetch goroutine takes it (see take).
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
	seq   uint64 // stream sequence
	del   uint64 // consumer sequence: which delivery of the consumer this is
	first bool   // the message's first delivery
	// dc is the delivery count of its latest delivery to this epoch
	// (NumDelivered). Guarded by p.mu once held.
	dc    uint64
	key   sessionKey
	high  bool
	epoch uint64
	fence uint64          // the epoch's, for Epoch
	ctx   context.Context // the epoch's: the task's submit ctx
	at    time.Time       // delivered
	// anchor is, on a pinned consumer, a time at or before the server last
	// started the message's AckWait: when this instance made the pull that
	// brought it (or its latest redelivery), or sent its latest InProgress.
	// Guarded by p.mu.
	anchor time.Time
	stage  uint8 // fetch goroutine: how far take got

	gone    bool // guarded by p.mu: nothing more is sent for it; its task does nothing
	started bool // guarded by p.mu: its task began

	attemptNo atomic.Int32 // for Attempt
	actx      attemptCtx   // the handler's ctx: the task's, with Attempt's value

	// The message task's own state (see process).
	next    step
	attempt int
	err     error // the last attempt's
	delay   time.Duration
	bErr    error // the backoff function's failure (stepBackoffFailed)
	bNext   step  // the wait that follows it
	dlFails int   // the dead-letter function's failures so far
	dlErr   error
	dlDone  bool
}

const pinHeader = "Nats-Pin-Id"

// answerableLocked reports whether an Ack or Term for h, sent at t, surely
// reaches the server before h's AckWait runs out there, on a pinned
// consumer (on a plain one it always is: see below). The server starts
// the AckWait when it delivers h and again when an InProgress for it
// arrives; h.anchor is a time at or before that. An answer sent within
// fresh of the anchor arrives in time, provided it takes less than half a
// tick on its way. Past that, the server may have redelivered h, to
// another instance if this one lost its pin meanwhile without knowing it
// yet (it stalled): an Ack from here would then take from the server's
// count of unacknowledged messages one that the new owner holds, and the
// new owner's catch-up could end while a message it waits for is still
// out (see checkCatchUp). So such an answer is withheld: h is remembered
// as resolved, and its next delivery to this instance, if any, gets the
// answer; on another instance it runs again (at least once).
//
// A Nak (a message given back) is withheld past the window too: from an
// owner that lost the pin it would make the server redeliver, after
// giveBackDelay, a message the new owner holds and counts on for its own
// window. The message comes back anyway, after its AckWait.
//
// A plain consumer has no catch-up to miscount: its answers always go.
// Called with mu held.
func (p *partition) answerableLocked(h *held, t time.Time) bool {
	if p.group == "" {
		return true
	}
	// The monotonic clock stops while the host sleeps (a suspended
	// laptop or VM), the server's AckWait does not: the time on the wall
	// clock counts too, whichever is longer.
	return t.Sub(h.anchor) < p.fresh && t.Round(0).Sub(h.anchor.Round(0)) < p.fresh
}

// startEpochLocked starts an epoch owned under pin. Called with gate
// write-locked and mu held (or before the consumer is shared).
func (p *partition) startEpochLocked(pin string) {
	p.epoch++
	p.owned, p.pin = true, pin
	p.ectx, p.ecancel = context.WithCancel(p.c.life)
	p.lastDel, p.own = 0, 0
	p.catchUp, p.unreachable = false, timedCount{}
	p.repin, p.repinDrain = false, time.Time{}
	clear(p.withheld)
	if p.group != "" {
		p.beginCatchUpLocked()
	}
}

// noteReplayLocked tells a replay from the consumer's first deliveries,
// which come in stream order: a first delivery at or below the highest
// one this partition took means the consumer's delivery state was reset
// (ResetConsumerToSequence, or deleted and made again under its name),
// and the server delivers its messages again from there. They must run
// again, so what was remembered as resolved is forgotten: a redelivery
// of a replayed message (its answer, or the replay itself, lost on its
// way) must not get the answer of the time before. (A first delivery
// never counts as a duplicate anyway: see resolvedLocked.) Called with
// mu held, for every delivery.
func (p *partition) noteReplayLocked(h *held) {
	if !h.first {
		return
	}
	if h.seq <= p.lastFirst {
		p.resolved.reset()
		clear(p.withheld)
		p.applied.reset()
		p.own = 0 // noteDeliveryLocked sets it again from h
	}
	p.lastFirst = h.seq
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
	if p.owned && p.repin {
		// Pinned anew after pinForgotten's unpin, which no other client
		// has taken (followRepin loses the partition as soon as the
		// server shows another client's pin): the epoch goes on under
		// the new pin. What was delivered
		// meanwhile, such as the status message, shows as a gap: the
		// epoch catches up, and the new pin's first delivery is the
		// fence (see noteDeliveryLocked).
		p.pin, p.repin, p.repinDrain, p.repinEnds = pin, false, time.Time{}, false
		p.lastDel, p.own = 0, 0
		p.beginCatchUpLocked()
		// While the partition was unpinned, another client may have been
		// pinned and taken messages this catch-up waits for: its bound
		// starts over (see giveUpDueLocked).
		p.cuSince, p.cuOverdue = time.Now(), time.Time{}
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
	p.repin, p.repinDrain, p.repinEnds = false, time.Time{}, false
	clear(p.withheld)
	n := len(p.held)
	for _, h := range p.held {
		h.gone = true
	}
	clear(p.held)
	p.waiting, p.catchUp = nil, false
	p.applied.reset() // a message this epoch dropped may come back behind one it applied
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
	p.c.logAt(p.c.life, levelWarn, "seqjetstream: partition lost; its messages are left to the pin's new owner",
		"stream", p.stream, "consumer", p.name, "reason", why, "dropped", dropped)
}

// dispatch takes a delivered message: a duplicate is answered or ignored,
// a new one held and, unless the epoch is catching up, submitted.
func (p *partition) dispatch(h *held) {
	var submit *held
	p.gate.RLock()
	p.mu.Lock()
	p.noteReplayLocked(h)
	if !p.closed && !p.closing && p.owned {
		p.noteDeliveryLocked(h)
	}
	switch {
	case p.closed:
		// Nothing may be sent any more: JetStream redelivers it.
		p.st.dropped.Add(1)
	case p.closing || !p.owned:
		late := !p.answerableLocked(h, now())
		p.mu.Unlock()
		if late {
			p.st.dropped.Add(1)
		} else {
			giveBack(h.msg)
			p.st.givenBack.Add(1)
		}
		p.gate.RUnlock()
		return
	case p.held[h.seq] != nil:
		// Redelivered while held (an InProgress came late): the held copy
		// goes on; this one needs no answer. Its AckWait started again
		// with this delivery, to this instance.
		if o := p.held[h.seq]; h.anchor.After(o.anchor) {
			o.anchor = h.anchor
		}
		if o := p.held[h.seq]; h.dc > o.dc {
			o.dc = h.dc
		}
		p.st.duplicates.Add(1)
	default:
		if termed, ok := p.resolvedLocked(h); ok {
			// Resolved here before, and the answer was lost: answer again,
			// unless this delivery too may have run out (see
			// answerableLocked): then the next one is answered.
			if !p.answerableLocked(h, now()) {
				// Done here: if this epoch withheld its answer, its
				// catch-ups go on counting it as theirs until a
				// redelivery gets the answer, but for its last delivery,
				// after which the server gives it up. One whose answer
				// went out (or whose answer an earlier epoch withheld,
				// when another client may have answered it since) is
				// not counted: its redelivery shows only that the server
				// still counted it when it sent this, and an answer that
				// landed after that (sent in its window, but slow on a
				// loaded host, or another client's) took it out of the
				// count. Counted, it would end a later catch-up while a
				// real message is still out (issue 45).
				if _, ok := p.withheld[h.seq]; ok {
					if p.lastDelivery(h) {
						delete(p.withheld, h.seq)
					} else {
						p.withheld[h.seq] = time.Now()
					}
				}
				p.mu.Unlock()
				p.st.dropped.Add(1)
				p.gate.RUnlock()
				return
			}
			delete(p.withheld, h.seq)
			p.mu.Unlock()
			// Counted before the answer goes out, so that whoever sees the
			// answer at the server sees the count too.
			p.st.duplicates.Add(1)
			if termed {
				_ = h.msg.Term()
			} else {
				_ = h.msg.Ack()
			}
			p.gate.RUnlock()
			return
		}
		h.epoch, h.ctx, h.fence = p.epoch, p.ectx, p.fence
		p.held[h.seq] = h
		p.armLocked()
		if p.catchUp {
			p.waiting = append(p.waiting, h)
			if h.seq <= p.cuD {
				p.cuMine++
			}
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

// lastDelivery reports whether h is its message's last delivery: the
// consumer's MaxDeliver is set and reached.
func (p *partition) lastDelivery(h *held) bool {
	md := p.cons.CachedInfo().Config.MaxDeliver
	if md <= 0 {
		return false
	}
	meta, err := h.msg.Metadata()
	return err == nil && meta.NumDelivered >= uint64(md)
}

// lastHeldDeliveryLocked reports whether h's latest delivery is its
// message's last under the consumer's MaxDeliver: a Nak of it, or its
// AckWait running out, makes the server give it up and count it no more
// (see catchUpChecked). Called with mu held.
func (p *partition) lastHeldDeliveryLocked(h *held) bool {
	md := p.cons.CachedInfo().Config.MaxDeliver
	return md > 0 && h.dc >= uint64(md)
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
