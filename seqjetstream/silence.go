package seqjetstream

import (
	"context"
	"time"
)

// Silence. The owner of a pinned partition may stop receiving while the
// server holds messages for it: nats.go's pulls carry no pin (or one the
// server does not serve) while the server still pins this instance. The
// server then delivers nothing, to this instance or any other, until
// PinnedTTL passes with no pull of the pin, and the owner keeps pulling
// in vain. A stored status message is one known way there (see
// pinForgotten, which recognises it by its 423); watchSilence catches
// every way, by what it costs: pulls that bring nothing.
//
// It costs nothing while pulls bring messages. After silenceFirst pull
// expiries with none, the owner asks the server (ConsumerInfo) whether it
// pins this instance and holds messages it has not delivered
// (NumPending), with room to deliver them (NumAckPending below
// MaxAckPending: the owner's own unacknowledged messages do not explain
// the silence). If so, it makes one more pull first, a new one; if that
// brings nothing too, and the server delivered nothing meanwhile, the
// partition is unpinned through WithHandover's (or WithBalance's)
// JetStream, as pinForgotten does, and followRepin follows it: the server
// pins the next pull, this instance's (the epoch goes on after a
// catch-up) or a standby's (the partition is lost as in any hand-over,
// its messages left to the new owner, whose catch-up keeps order). While
// nothing is pending the look is repeated at doubling intervals, up to
// silenceMax pull expiries apart, so an idle partition asks the server
// little.

const (
	silenceFirst = 3  // pull expiries with nothing before the first look
	silenceMax   = 16 // pull expiries between looks on a partition that stays silent
)

// watchSilence follows, after each pull of a pinned consumer, whether the
// pull brought anything (got), and looks at the server once the partition
// has been silent long enough (see above). Called on the fetch goroutine.
func (p *partition) watchSilence(ctx context.Context, got int) {
	if p.group == "" || ctx.Err() != nil {
		return
	}
	now := time.Now()
	first := silenceFirst * p.pullExpiry()
	if got > 0 || p.lookAt.IsZero() {
		p.lookAt, p.silenceWait, p.suspect, p.silenceLogged = now.Add(first), first, false, false
		return
	}
	if now.Before(p.lookAt) {
		return
	}
	if p.lookAtSilence(ctx) {
		return // look again after the next pull
	}
	p.silenceWait = min(2*p.silenceWait, silenceMax*p.pullExpiry())
	p.lookAt = time.Now().Add(p.silenceWait)
}

// lookAtSilence asks the server about a silent partition and acts on its
// answer (see above). It reports whether to look again after the next
// pull: the server held messages for this instance, and the pull to come
// is the new one made before unpinning.
func (p *partition) lookAtSilence(ctx context.Context) (again bool) {
	p.mu.Lock()
	pin, owned, repin := p.pin, p.owned, p.repin
	p.mu.Unlock()
	if !owned || repin || pin == "" {
		p.suspect = false
		return false
	}
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	info, err := p.cons.Info(ictx)
	cancel()
	if err != nil {
		return false
	}
	server := ""
	for _, g := range info.PriorityGroups {
		if g.Group == p.group {
			server = g.PinnedClientID
		}
	}
	full := info.Config.MaxAckPending > 0 && info.NumAckPending >= info.Config.MaxAckPending
	if info.NumPending == 0 || full || server != pin {
		p.suspect = false
		return false
	}
	del := info.Delivered.Consumer
	if !p.suspect || p.suspectDel != del {
		p.suspect, p.suspectDel = true, del
		return true
	}
	// A whole new pull went unserved while the server pinned this
	// instance and held messages for it.
	p.suspect = false
	js := p.c.handover
	if js == nil {
		if !p.silenceLogged {
			p.silenceLogged = true
			p.c.logAt(p.c.life, levelError, "seqjetstream: the partition receives nothing while the server pins this instance and holds messages for it; without WithHandover or WithBalance it cannot be unpinned, and resumes only after PinnedTTL",
				"stream", p.stream, "consumer", p.name, "pending", info.NumPending)
		}
		return false
	}
	p.mu.Lock()
	stays := p.owned && p.pin == pin && !p.repin
	if stays {
		p.repin, p.repinSince, p.repinDrain = true, time.Now(), time.Time{}
	}
	p.mu.Unlock()
	if !stays {
		return false
	}
	p.c.logAt(p.c.life, levelWarn, "seqjetstream: the partition received nothing while the server pinned this instance and held messages for it; the partition is unpinned, to be pinned anew",
		"stream", p.stream, "consumer", p.name, "pending", info.NumPending)
	p.unpinToRepin(ctx)
	return false
}
