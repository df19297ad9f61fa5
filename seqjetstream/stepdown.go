package seqjetstream

import (
	"context"
	"log/slog"
	"time"
)

// The partition's side of WithBalance (see balance.go): whether it is
// assigned here, and the step-down from a partition assigned elsewhere.

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

// stepDown hands the partition to its assignee. What has not started is
// given back (it comes back after giveBackDelay); what runs is let finish
// and acknowledged, for at most drainWait, while this instance still
// holds the pin (it does not pull meanwhile, and nothing new arrives).
// Then the epoch ends (the answers of handlers still running are
// dropped, and those messages come back after their AckWait) and the
// partition is unpinned, so that the server pins the assignee's pull at
// once. The assignee catches up, keeping key order; draining first means
// it waits for the messages given back, not for a running one's AckWait,
// and runs none of them again. Should the partition be assigned here
// again meanwhile, or Run end, the step-down stops there.
func (p *partition) stepDown(ctx context.Context) {
	p.gate.RLock()
	p.mu.Lock()
	back, late := p.answerableOnlyLocked(p.takeUnstartedLocked())
	idle := make(chan struct{})
	p.idle = idle
	p.checkDrainedLocked()
	wake := p.assignWake
	running := len(p.held)
	p.mu.Unlock()
	p.giveBackAll(back, late)
	p.gate.RUnlock()

	wait := p.drainWait()
	p.c.logAt(p.c.life, slog.LevelDebug, "seqjetstream: stepping down (WithBalance): letting running handlers finish before the hand-over",
		"stream", p.stream, "consumer", p.name, "running", running, "wait", wait)
	t := time.NewTimer(wait)
	select {
	case <-idle:
	case <-t.C:
	case <-ctx.Done():
	case <-wake:
	}
	t.Stop()
	p.mu.Lock()
	if p.idle == idle {
		p.idle = nil
	}
	again := p.assigned
	p.mu.Unlock()
	if again || ctx.Err() != nil {
		// Assigned here again: the epoch goes on. Or Run ends: the
		// partition is left as any other this instance owns, for Close
		// to drain and unpin.
		return
	}
	p.mu.Lock()
	pin := p.pin
	p.mu.Unlock()
	p.lose("assigned to another instance (WithBalance)")
	uctx, cancel := context.WithTimeout(ctx, handoverWait)
	defer cancel()
	p.unpinOwn(uctx, p.c.bal.js, pin)
}

// drainWait bounds how long a step-down lets running handlers finish: a
// held message's answer window (past it the answer would be withheld
// anyway), and half the PinnedTTL, so that the pin, renewed by no pull
// meanwhile, is still this instance's when it unpins.
func (p *partition) drainWait() time.Duration {
	return max(0, min(p.fresh, p.cons.CachedInfo().Config.PinnedTTL/2))
}
