package seqjetstream

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// beginClose gives back, at once, the messages that have not started:
// queued ones and those held back by a catch-up.
func (p *partition) beginClose() {
	p.gate.RLock()
	defer p.gate.RUnlock()
	p.mu.Lock()
	p.closing = true
	var back []*held
	if !p.closed {
		back = p.takeUnstartedLocked()
	}
	back, late := p.answerableOnlyLocked(back)
	p.waiting, p.catchUp = nil, false
	p.checkDrainedLocked()
	p.mu.Unlock()
	p.giveBackAll(back, late)
}

// takeUnstartedLocked takes the held messages whose task has not started
// out of the partition, to be given back: nothing more is sent for them
// but that. Called with the gate read-locked and mu held.
func (p *partition) takeUnstartedLocked() []*held {
	var back []*held
	for _, h := range p.held {
		if !h.started {
			h.gone = true
			delete(p.held, h.seq)
			back = append(back, h)
		}
	}
	return back
}

func bySeq(a, b *held) int { return cmp.Compare(a.seq, b.seq) }

// giveBackAll gives hs back in stream order, and counts late more as
// dropped (see answerableOnlyLocked). Called with no lock but the gate.
func (p *partition) giveBackAll(hs []*held, late int) {
	slices.SortFunc(hs, bySeq)
	for _, h := range hs {
		giveBack(h.msg)
	}
	p.st.givenBack.Add(uint64(len(hs)))
	p.st.dropped.Add(uint64(late))
}

// answerableOnlyLocked keeps, in place, the messages of hs that may still
// be given back, and counts the others: past their answer window, they
// come back after their AckWait (see answerableLocked). Called with mu
// held.
func (p *partition) answerableOnlyLocked(hs []*held) (kept []*held, late int) {
	t := now()
	kept = hs[:0]
	for _, h := range hs {
		if p.answerableLocked(h, t) {
			kept = append(kept, h)
		}
	}
	clear(hs[len(kept):])
	return kept, len(hs) - len(kept)
}

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
	if p.idle != nil && len(p.held) == 0 {
		close(p.idle)
		p.idle = nil
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
	back, late := p.answerableOnlyLocked(back)
	clear(p.held)
	p.waiting, p.catchUp = nil, false
	p.hbStop = true
	if p.hbArmed && p.hb.Stop() {
		p.hbArmed = false
		p.hbWG.Done()
	}
	p.mu.Unlock()
	p.giveBackAll(back, late)
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

// handoverWait bounds Close's wait for the server's answers to its
// unpins (see unpinAll).
const handoverWait = time.Second

// unpinAll unpins the pinned consumers this instance owns, all at once,
// and waits for the server's answers at most handoverWait (or until ctx
// ends): a request to a server that is down would otherwise wait out
// ctx, partition after partition. A partition whose unpin gets no answer
// in time is taken over after its PinnedTTL instead.
//
// Close calls it last, once its partitions are closed, as a step-down
// unpins only after its epoch ended: every answer this instance sent went
// out before the unpin, on its way to the server ahead of it when both
// share a connection, and none follows. Unpinned while its handlers still
// ran, the server could redeliver to the standby a message whose Ack,
// sent within its answer window but slow on a loaded host, reached the
// server after its AckWait: it takes the message off the server's count
// while the standby holds it, and the standby's catch-up, counting it as
// its own, ended with an earlier message still out, so a later one of its
// key ran first (issue 45's balanced seed). The standby loses nothing by
// the wait: its catch-up waited for those answers anyway. (A drain longer
// than the PinnedTTL still lets the server pin the standby meanwhile, as
// this instance no longer pulls.)
func (c *Consumer) unpinAll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, handoverWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range c.parts {
		p.mu.Lock()
		owned, pin := p.owned && p.group != "", p.pin
		p.mu.Unlock()
		if owned {
			wg.Go(func() { p.unpinOwn(ctx, c.handover, pin) })
		}
	}
	wg.Wait()
}

// unpinOwn unpins the partition unless the server, asked first, pins a
// client other than pin, this instance's: one that stopped pulling (a
// drain longer than PinnedTTL, a stall) may have lost the pin without
// knowing, and the server's unpin takes whatever pin is current. Taken
// from the new owner, the unpin ends that owner's pull, which the server
// had pinned, in a 423 and costs it its epoch (issue 45: a Close did so
// 90ms after it ended). Should the server not answer, it unpins all the
// same. The question and the unpin are two requests: a pin that moves
// between them is still taken, which costs its owner a hand-over, never
// order (see pinForgotten).
func (p *partition) unpinOwn(ctx context.Context, js jetstream.JetStream, pin string) {
	if now, ok := p.serverPin(ctx); ok && now != pin {
		return
	}
	p.unpin(ctx, js)
}

// unpin gives up this instance's pin, for a standby to take over at once.
func (p *partition) unpin(ctx context.Context, js jetstream.JetStream) {
	s, err := js.Stream(ctx, p.stream)
	if err != nil {
		return // the standby takes over after PinnedTTL instead
	}
	_ = s.UnpinConsumer(ctx, p.name, p.group)
}
