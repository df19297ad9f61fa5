package seqjetstream

import (
	"context"
	"errors"
	"slices"
	"time"
)

// Messages with a Status header. nats.go's Fetch takes any delivery with
// a Status header and no data for a status message of the server, though
// such a message can be stored by any publisher (the server sends its own
// with no reply subject; nats.go does not look). The server counts it
// delivered, and redelivers it every AckWait, for ever or until
// MaxDeliver; nats.go never hands it over. What it does besides depends on
// the status:
//
//   - 100: it drops the message and goes on. On a pinned consumer the
//     owner sees a gap in the delivery sequence and catches up for a
//     message that never comes; the catch-up is given up at its bound,
//     and the epoch does not wait for it again (see giveUpLocked).
//   - 423: it also forgets its pin, and pulls without one: the server,
//     still pinning this instance, delivers nothing to those pulls. See
//     pinForgotten. Such a message also ends its pull, as below, and the
//     instance pulls singly for a while after it (see noteEnd), so that
//     its next redelivery comes alone.
//   - any other: it ends the pull at once, and drops what the server sent
//     to that pull after it. Those come back after their AckWait, together
//     with the status message, whose redelivery comes first and ends that
//     pull too; so on, for ever. See pullSingly.

// noteEnd looks at how a pinned consumer's pull ended: one that a status
// ended early (a pull ends at the count it asked for, or at its expiry)
// may have lost what the server sent it after that status, and the
// partition pulls singly (see pullSingly). err is the pull's.
func (p *partition) noteEnd(early bool, err error) {
	switch {
	case err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled):
	case early:
	default:
		return
	}
	p.pullSingly(time.Now())
}

// pullSingly makes every pull of the fetch goroutine ask for one message,
// for at least two of the longest redelivery waits and until no catch-up
// is in progress or the catch-up's bound starts over (see startOver). A
// pull of one message has nothing behind it to lose: a status message
// ends its own pull only, and the messages after it come in the next
// ones. So a catch-up waiting for messages lost behind a
// status message gets them within two waits. Called on the fetch
// goroutine.
func (p *partition) pullSingly(t time.Time) {
	if !p.single {
		p.single, p.singleSince = true, t
	}
}

// pinForgotten handles a pull that ended with a 423 status
// (jetstream.ErrPinIDMismatch), on the fetch goroutine. The server sends
// one to a pull that carries a pin other than the current one: this
// instance lost the partition. But two kinds of stored message make
// nats.go send such a pull while the server still pins this instance:
//
//   - an empty message with Status 423 gives the same error, and makes
//     nats.go forget its pin: its pulls then carry none, and the server,
//     still pinning it, delivers nothing to them until PinnedTTL passes
//     with no pull of the pin; then it pins the next pull, delivering it
//     the same message first (its AckWait long passed), which makes that
//     client forget the new pin; so on, for ever.
//   - a message stored with a Nats-Pin-Id header of its own (forged: see
//     pinOf) makes nats.go send that pin with its next pull, which the
//     server refuses with a 423, and nats.go then forgets it: its pulls
//     carry none, as above. The message itself came, and ran or runs.
//
// The server answers with a 423 a waiting pull whose pin is not its current
// one: a pull sent with a pin, but also one sent without, that the server
// pinned when the pin was free (it writes the new pin into the waiting
// request, and delivers to it), if the pin moves again while that request
// still waits: another instance's Close unpinning a pin it no longer held,
// or a PinnedTTL (issue 45). Such a pull took a delivery under its pin
// (pullPinned says so), unless nats.go swallowed it: a stored status
// message. Pins are never used twice, so after the server's own 423 it pins
// no pin this instance took deliveries under. So the 423 was such a stored
// message when the pull carried no pin and took no delivery under one, or
// when it carried a forged one, or when the server, asked now, still pins
// the pull's pin. Then the partition stays owned (if it was), and its epoch
// goes on: the running handlers' answers go out, and what they resolved
// stays remembered. A status message, never to be got, is counted as out of
// the epoch's reach at once, so that a catch-up that waited for it ends,
// but only with proof: the server, asked now, still pins the pin this epoch
// took its deliveries under (and, with a finite MaxDeliver, only for one
// redelivery wait from the pull it came to, after which the server may
// have given it up: see statusCountedUntil). Without it (a pull without
// a pin whose first delivery was the stored message, the pin moved
// since) nothing is counted,
// for a real message may be what is missing: the catch-up under the new pin
// waits (starting over at its bounds) until a redelivery of the status
// message reaches a pull of a pin this epoch took deliveries under, or the
// server gives it up (MaxDeliver); the first such message an epoch meets
// comes, as a rule, to its own pinned pull. Counted on a 423 of the
// server's, the one message let a later catch-up end with a real message
// still out, and run later messages of its key first (issue 45, seed
// 2823274999529456777). What the epoch holds is let run first (for at most
// drainWait: the server, pinning this instance, delivers nothing to anyone
// meanwhile), and only then is the partition unpinned through
// WithHandover's (or WithBalance's) JetStream (see followRepin), so that
// the server pins the next pull: if that is this instance's, the epoch goes
// on under the new pin (see followPin); if it is another instance's,
// followRepin sees it and the partition is lost as in any hand-over, with
// nothing left to lose. Unpinning at once instead gave a standby, whose
// pull waits at the server, the pin and the messages the catch-up held; its
// own catch-up then waited for the status message's next redelivery, which
// made it unpin in turn, and the partition could pass back and forth with
// nothing run, an AckWait each time. Losing the epoch at once instead (as
// was done for a forged pin) dropped what it held: a handler that ran
// meanwhile ran its message again on the next pin, and a catch-up slower
// than the pull that followed the forged message never ended, for its
// messages came back together, forged pin and all, every AckWait.
//
// It reports whether the partition stays owned. Without a JetStream to
// unpin with, the epoch drains the same way. After a forged pin it then
// waits for the server to move the pin after PinnedTTL: it goes on if the
// new pin is this instance's in time, and is lost, with nothing left to
// lose, otherwise (see followRepin). After a status message nothing can
// be done but wait for the server to give the message up (MaxDeliver),
// for each new pin gets it first and forgets itself: the epoch ends once
// drained (repinEnds), and the failure is logged at Error. Losing it at
// once, as was done before, refused the answers of the handlers running
// at the 423, and their messages ran again on the next pin (or, with a
// MaxDeliver, were given up unacknowledged). When forged and the server
// does not answer, the partition is unpinned regardless (the caller
// loses it).
func (p *partition) pinForgotten(ctx context.Context, forged bool) bool {
	if ctx.Err() != nil {
		return false
	}
	p.mu.Lock()
	pin, owned := p.pin, p.owned
	p.mu.Unlock()
	now, ok := p.serverPin(ctx)
	if forged && !ok {
		p.unpinForged(ctx)
		return false
	}
	if !ok || now == "" || ((p.pullPinned || forged) && now != pin) {
		return false // a 423 of the server's: the pin moved
	}
	ends := p.c.handover == nil && !forged // no unpin can follow the drain: the epoch ends instead
	p.mu.Lock()
	stays := owned && p.owned && p.pin == pin
	drain := false // a drain begins: followRepin unpins after it
	if stays {
		if !p.repin {
			p.repin, p.repinSince = true, time.Now()
			p.repinDrain, drain = p.repinSince.Add(p.drainWait()), true
			p.repinEnds = ends
		}
		if !forged && now == pin {
			// Proof of a stored status message, which nats.go swallows
			// and the server counts unacknowledged: the server still
			// pins the pin this epoch took its deliveries under, and
			// it never answers a pull of its current pin with a 423.
			p.provenUnreachableLocked(p.pullAt)
		}
		p.pin = now
	}
	p.mu.Unlock()
	switch {
	case ends:
		p.c.logAt(p.c.life, levelError, "seqjetstream: an empty message with a Status 423 header made nats.go forget this instance's pin; without WithHandover or WithBalance the partition cannot be unpinned: it is lost once what it holds is done, and stops each time the message is delivered, until the server gives it up: set MaxDeliver",
			"stream", p.stream, "consumer", p.name)
	case forged:
		p.c.logAt(p.c.life, levelWarn, "seqjetstream: a message's stored Nats-Pin-Id header made nats.go pull with a pin that is not this instance's; the partition is unpinned once what it holds is done, to be pinned anew (without WithHandover or WithBalance, after PinnedTTL)",
			"stream", p.stream, "consumer", p.name)
	default:
		p.c.logAt(p.c.life, levelWarn, "seqjetstream: an empty message with a Status 423 header made nats.go forget this instance's pin; the partition is unpinned once what it holds is done, to be pinned anew",
			"stream", p.stream, "consumer", p.name)
	}
	if !drain && !ends {
		p.unpinToRepin(ctx)
	}
	return stays
}

// status423Reason is why a partition is lost after a stored status
// message with no JetStream to unpin with (see pinForgotten).
const status423Reason = "an empty message with a Status 423 header made nats.go forget this instance's pin, and there is no JetStream to unpin with (WithHandover, WithBalance)"

// followRepin follows, after each pull, a partition unpinned by
// pinForgotten until a delivery under its new pin comes (followPin). If
// the server pins another client (or this one, its delivery still on its
// way: then the next owner's catch-up costs only time), the partition is
// lost, as in any hand-over. If it still pins the old pin, the unpin did
// not reach it, and is sent again. If no delivery has pinned this
// instance anew within half a catch-up's bound, the partition is lost
// too: the status message alone may be what the server delivers after
// each unpin (every other message held by instances waiting, as this
// one, to be pinned anew), and only dropping what it holds lets the
// server deliver it to a new owner. Called on the fetch goroutine.
//
// Before that, while pinForgotten's drain lasts (repinDrain), it only
// waits for the epoch's held messages to be done, and unpins once they
// are, or once the drain's time is up; the time to be pinned anew counts
// from there. With repinEnds, the partition is lost there instead.
func (p *partition) followRepin(ctx context.Context) {
	p.mu.Lock()
	pin, repin, since, ends := p.pin, p.repin && p.owned, p.repinSince, p.repinEnds
	draining, unpin := false, false
	if repin && !p.repinDrain.IsZero() {
		draining = true
		if t := time.Now(); len(p.held) == 0 || !t.Before(p.repinDrain) {
			p.repinDrain, p.repinSince, unpin = time.Time{}, t, true
		}
	}
	p.mu.Unlock()
	if !repin || ctx.Err() != nil {
		return
	}
	switch {
	case draining && !unpin:
		return
	case ends:
		p.lose(status423Reason)
		return
	case draining:
		p.unpinToRepin(ctx)
		return
	}
	if time.Since(since) >= p.cuLimit/2 {
		p.lose("not pinned anew since a stored message made nats.go forget the pin")
		return
	}
	idle := !p.unpinning.Load() // an unpin asked before the server's answer below was taken has ended
	now, ok := p.serverPin(ctx)
	switch {
	case !ok || now == "":
	case now == pin:
		if idle {
			p.unpinToRepin(ctx)
		}
	default:
		p.lose("pinned to another client")
	}
}

// unpinToRepin unpins the partition on a goroutine of its own, counted in
// Run's wait group, within handoverWait; one at a time.
func (p *partition) unpinToRepin(ctx context.Context) {
	js := p.c.handover
	if js == nil || ctx.Err() != nil || !p.unpinning.CompareAndSwap(false, true) {
		return
	}
	p.runWG.Go(func() {
		defer p.unpinning.Store(false)
		uctx, cancel := context.WithTimeout(ctx, handoverWait)
		defer cancel()
		p.unpin(uctx, js)
	})
}

// serverPin asks the server which client it pins the partition to ("":
// none); ok is false when it did not answer within a second.
func (p *partition) serverPin(ctx context.Context) (pin string, ok bool) {
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := p.cons.Info(ictx)
	if err != nil {
		return "", false
	}
	for _, g := range info.PriorityGroups {
		if g.Group == p.group {
			return g.PinnedClientID, true
		}
	}
	return "", true
}

// giveBackToRepin gives back, at once (a Nak without delay), what epoch
// holds and has not started, when a stored status message made nats.go
// forget the pin while the epoch's catch-up misses more than that message
// (see catchUpChecked): the server, still pinning this instance, delivers
// them to no one until the unpin that follows, and then to the next
// owner, this instance or another, at once. Dropped with the epoch
// instead, they would come back only after their AckWait, together with
// the status message's next redelivery, which takes the pin from that
// owner in turn: two instances could pass the partition back and forth,
// each missing what the other held. Called on the fetch goroutine, with
// no lock held.
func (p *partition) giveBackToRepin(epoch uint64) {
	p.gate.RLock()
	defer p.gate.RUnlock()
	p.mu.Lock()
	if p.epoch != epoch || !p.owned || p.closing || p.closed {
		p.mu.Unlock()
		return
	}
	back, late := p.answerableOnlyLocked(p.takeUnstartedLocked())
	p.waiting = slices.DeleteFunc(p.waiting, func(h *held) bool { return h.gone })
	p.cuNeed, p.cuMine = -1, 0 // the next check counts afresh
	p.checkDrainedLocked()
	p.mu.Unlock()
	slices.SortFunc(back, bySeq)
	for _, h := range back {
		_ = h.msg.Nak()
	}
	p.st.givenBack.Add(uint64(len(back)))
	p.st.dropped.Add(uint64(late))
}
