package seqjetstream

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/seqsched/seqsched/internal/logkey"
)

// fetchLoop is a partition's fetch goroutine, started and waited for by
// Run. User code runs on it at two sites, the key function and the
// logger; when either calls runtime.Goexit, a fresh goroutine (also waited
// for by Run) carries on from the partition's fetch state.
func (p *partition) fetchLoop(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	p.runWG = wg
	normal := false
	defer func() {
		if !normal {
			wg.Add(1)
			go p.fetchLoop(ctx, wg)
		}
	}()
	p.fetch(ctx)
	normal = true
}

// fetch keeps one pull request outstanding until ctx ends.
func (p *partition) fetch(ctx context.Context) {
	if h := p.keying; h != nil {
		p.take(h) // the predecessor stopped in a callback while taking h
	}
	if p.batch != nil {
		// How the predecessor's pull began is lost with it: taken as one
		// that may have lost deliveries on their way (see noteSealed).
		p.drainBatch(ctx)
		p.noteSealed(pullEnd{dead: true, expiry: p.pullExpiry()})
	}
	for ctx.Err() == nil {
		if p.c.bal != nil && !p.waitAssigned(ctx) {
			return
		}
		n, expiry := p.pullSize()
		start := time.Now()
		fctx, cancel := newPullCtx(ctx, expiry)
		opts := []jetstream.FetchOpt{jetstream.FetchContext(fctx)}
		if p.group != "" {
			opts = append(opts, jetstream.FetchPriorityGroup(p.group))
		}
		p.pullAt = now()
		p.pullPinned = p.withPin
		p.pullReconnects, p.pullReconnected = p.reconnects(), false
		b, err := p.cons.Fetch(n, opts...)
		sent := time.Now()
		if err != nil {
			cancel()
			p.fetchFailed(ctx, err)
			continue
		}
		p.batch, p.batchCancel = b, cancel
		got, err := p.drainBatch(ctx)
		early := got < n && time.Since(start) < expiry*8/10
		p.noteSealed(pullEnd{n: n, got: got, err: err, early: early, dead: p.group != "" && p.reconnectedSincePull(), took: time.Since(start),
			expiry: expiry, waitAtLeast: serverWaitAtLeast(start.Add(expiry).Sub(sent))})
		if p.group != "" && ctx.Err() == nil {
			p.noteEnd(early, err)
			p.watchSilence(ctx, got)
		}
	}
}

// pullSize returns the next pull's batch and its expiry. The batch is the
// consumer's MaxAckPending (newPartitions checks that MaxRequestBatch
// allows it), or 1 while pulling singly (see pullSingly). It is not the
// room left under the bound: the server delivers no more new messages
// than MaxAckPending less those it counts unacknowledged, which include
// every held one, and MaxAckPending is at most the bound (see
// WithMaxBuffered), so no pull can take the partition past it; the rest
// of a pull's room goes to redeliveries, and a redelivery of a held
// message takes none. Sized by the room left, a partition holding close
// to MaxAckPending (a catch-up, or a key's backlog) pulled one message at
// a time, and when a stall kept its InProgress back, the server's
// redeliveries of what it held took every turn of those pulls, ahead of
// the messages a catch-up waited for (issue 45). The expiry is, on a pinned
// consumer, at most a tick, whatever WithFetchExpiry says, so that a
// message arrives with most of its answer window ahead (its anchor is the
// pull's start: see answerableLocked); this also checks a catch-up every
// tick, and the catch-up after gaining a pin early (the pull that
// receives the pin goes on, and a pull is never ended early: nats.go
// drops what is in flight to it).
func (p *partition) pullSize() (int, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.single && !p.catchUp && time.Since(p.singleSince) >= p.cuLimit/2 {
		p.single = false
	}
	n := p.maxPull
	if p.single {
		n = 1
	}
	return n, p.pullExpiry()
}

// pullCtx is a pull's ctx as nats.go's FetchContext sees it: its deadline
// is the pull's expiry, which FetchContext asks the server for, but it
// ends only when Run ends, or one more expiry after that deadline. The
// server ends the pull itself at its expiry (a 408 status), after every
// message it delivered to the pull, so the pull ends by the server's word
// and nothing is on its way to it then; the backstop ends a pull whose
// end did not come (a broken connection, or a pull the server ended
// without one, filled by a message with a Status header: see status.go).
//
// A ctx that ended at the deadline would end the pull from this side
// while deliveries may still be on their way (nats.go asks the server for
// 90% of the time left, which leaves 17ms of a pinned consumer's 167ms
// pull), and nats.go drops what comes after, and what waits in its buffer
// when it sees the ctx end: the server counts those delivered and
// redelivers them after their AckWait, when they may be lost the same
// way. On a loaded machine that went on past the bound of a catch-up
// waiting for them, which then ran later messages of their keys first.
type pullCtx struct {
	context.Context // ends with Run, or at the backstop
	deadline        time.Time
}

func (c pullCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// serverWaitAtLeast is the least that nats.go's FetchContext can have
// asked the server to hold a pull whose ctx had remaining left before its
// deadline when Fetch returned: it asks for the time left then, less a
// tenth of it, at most a second.
func serverWaitAtLeast(remaining time.Duration) time.Duration {
	if remaining <= 0 {
		return 0
	}
	return remaining - min(remaining/10, time.Second)
}

// newPullCtx returns the ctx of a pull that expires after expiry (see
// pullCtx), and its cancel.
func newPullCtx(ctx context.Context, expiry time.Duration) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(expiry)
	bctx, cancel := context.WithDeadline(ctx, deadline.Add(expiry))
	return pullCtx{bctx, deadline}, cancel
}

// pullExpiry is how long each pull waits (see pullSize).
func (p *partition) pullExpiry() time.Duration {
	if p.group != "" {
		return max(min(p.expiry, p.tick), 100*time.Millisecond)
	}
	return p.expiry
}

// drainBatch takes every message of the current pull, and the catch-up
// checks' answers meanwhile, then handles how the pull ended. It returns
// how many messages the pull brought and the error it ended with.
func (p *partition) drainBatch(ctx context.Context) (got int, err error) {
	msgs := p.batch.Messages()
	for msgs != nil {
		select {
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				break
			}
			got++
			p.receive(m)
			if p.catchUpDue() {
				p.checkCatchUp(ctx)
			}
		case r := <-p.checked:
			p.catchUpChecked(ctx, r)
		}
	}
	err = p.batch.Error()
	p.batch = nil
	p.batchCancel()
	p.batchCancel = nil
	switch {
	case err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		p.failures = 0
	case errors.Is(err, jetstream.ErrPinIDMismatch):
		p.failures = 0
		forged := p.forgedPin
		p.forgedPin, p.withPin = false, false // nats.go forgets its pin at a 423
		switch {
		case p.pinForgotten(ctx, forged):
		case forged:
			p.lose(forgedPinReason)
		default:
			p.lose("pinned to another client")
		}
	default:
		p.fetchFailed(ctx, err)
	}
	if ctx.Err() == nil && p.catchingUp() {
		p.checkCatchUp(ctx)
	}
	p.followRepin(ctx)
	return got, err
}

// receive reads m's sequence and priority, and takes it.
func (p *partition) receive(m jetstream.Msg) {
	p.st.received.Add(1)
	meta, err := m.Metadata()
	if err != nil {
		p.c.logAt(p.c.life, levelWarn, "seqjetstream: message without JetStream metadata ignored",
			"stream", p.stream, "consumer", p.name, "subject", logkey.Cut(m.Subject()), "err", err)
		return
	}
	h := &held{p: p, msg: m, seq: meta.Sequence.Stream, del: meta.Sequence.Consumer, first: meta.NumDelivered == 1, dc: meta.NumDelivered, at: now(), anchor: p.pullAt}
	if ph := p.c.cfg.priorityHeader; ph != "" {
		h.high = strings.EqualFold(m.Headers().Get(ph), "high")
	}
	p.keying = h
	p.take(h)
	p.keying = nil
}

// take moves h through its stages: the epoch its pin says, its key, its
// dispatch. Each stage is recorded before the user code in it runs (the
// key function, the logger), so that a goroutine taking over after a
// runtime.Goexit goes on from the next stage.
func (p *partition) take(h *held) {
	if h.stage == stageNew {
		h.stage = stageEpoch
		if p.group != "" {
			pin, forged := pinOf(h.msg)
			p.forgedPin = forged
			p.withPin = p.withPin || pin != ""
			// A delivery under a pin means the server pinned this pull,
			// whatever it carried when sent: it wrote the new pin into a
			// request sent without one (see pinForgotten).
			p.pullPinned = p.pullPinned || pin != ""
			p.followPin(pin)
		}
	}
	if h.stage == stageEpoch {
		h.stage = stageKey
		h.key = p.sessionKeyOf(h)
		h.stage = stageKeyed
	}
	if h.stage == stageKey {
		// The key function, or the log of its panic, called Goexit.
		h.stage = stageKeyed
		h.key = sessionKey{part: p.idx}
		p.dispatch(h)
		p.keying = nil
		p.c.logAt(p.c.life, levelError, "seqjetstream: key function called runtime.Goexit; message ordered under the empty key",
			"stream", p.stream, "consumer", p.name, "sequence", h.seq)
		return
	}
	p.dispatch(h)
}

// pinOf returns the pin id the server delivered m under: the last
// Nats-Pin-Id header, which the server appends to whatever headers the
// message was stored with. A publisher may have stored one of its own
// (forwarding a delivered message with all its headers, say), which then
// comes first; forged reports that, for nats.go takes the first for the
// pin and sends it with its next pull, which the server refuses (see
// pinForgotten).
func pinOf(m jetstream.Msg) (pin string, forged bool) {
	vs := m.Headers().Values(pinHeader)
	if len(vs) == 0 {
		return "", false
	}
	pin = vs[len(vs)-1]
	return pin, vs[0] != pin
}

// forgedPinReason is why a partition is lost after a stored pin header.
const forgedPinReason = "a message's stored Nats-Pin-Id header made nats.go pull with a pin that is not this instance's; the server pins the partition anew after PinnedTTL, or at once with WithHandover"

// unpinForged unpins the partition through WithHandover's (or
// WithBalance's) JetStream, if any, after a pull was refused for a pin
// that a message's stored header gave nats.go (see pinOf) and the server
// did not say whom it pins (see pinForgotten): it may still pin this
// instance's real pin, which no pull carries any more, so without the
// unpin no one would get the partition until PinnedTTL. The server then
// pins the next pull, this instance's or a standby's, whose catch-up
// keeps key order. Should the pin have moved meanwhile, the unpin costs
// its new owner a catch-up, not order. The request runs on a goroutine
// of its own, counted in Run's wait group, within handoverWait.
func (p *partition) unpinForged(ctx context.Context) {
	js := p.c.handover
	if js == nil || ctx.Err() != nil {
		return
	}
	p.runWG.Go(func() {
		uctx, cancel := context.WithTimeout(ctx, handoverWait)
		defer cancel()
		p.unpin(uctx, js)
	})
}

// sessionKeyOf returns the session h is ordered in: its partition's,
// under its key in the form the key memory keeps (memKey), so that a key
// longer than maxKeyBytes is named by its SHA-256. The scheduler keeps the
// sessions of thousands of recently idle keys after their messages are
// done, each with its key, and a publisher's key may be as long as a
// header (64 KiB) or, with WithKeyFunc, a payload (1 MiB): named by its
// hash, a done key leaves at most maxKeyBytes+1 bytes behind. Two long keys
// share a session only if SHA-256 collides.
func (p *partition) sessionKeyOf(h *held) sessionKey {
	return sessionKey{part: p.idx, key: memKey(p.keyOf(h))}
}

// keyOf returns h's ordering key: the key function's, the key header's,
// or the subject.
func (p *partition) keyOf(h *held) string {
	cfg := p.c.cfg
	switch {
	case cfg.key != nil:
		var k string
		if perr := call(func() { k = cfg.key(h.msg) }); perr != nil {
			p.c.logAt(p.c.life, levelError, "seqjetstream: key function panicked; message ordered under the empty key",
				"stream", p.stream, "consumer", p.name, "sequence", h.seq, "err", perr)
			return ""
		}
		return k
	case cfg.keyHeader != "":
		return h.msg.Headers().Get(cfg.keyHeader)
	default:
		return h.msg.Subject()
	}
}

// fetchFailed logs a failed pull (the first of a run of failures, then
// every tenth) and waits before the next: 100ms, doubling up to 5s.
func (p *partition) fetchFailed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	p.failures++
	if p.failures%10 == 1 {
		p.c.logAt(p.c.life, levelWarn, "seqjetstream: fetch failed; retrying",
			"stream", p.stream, "consumer", p.name, "failures", p.failures, "err", err)
	}
	d := 100 * time.Millisecond
	for i := 1; i < p.failures && d < 5*time.Second; i++ {
		d *= 2
	}
	t := time.NewTimer(min(d, 5*time.Second))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
