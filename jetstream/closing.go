package jetstream

import (
	"cmp"
	"context"
	"slices"

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
	late := 0
	if !p.closed {
		t := now()
		for _, h := range p.held {
			if !h.started {
				h.gone = true
				delete(p.held, h.seq)
				if p.answerableLocked(h, t) {
					back = append(back, h)
				} else {
					late++ // it comes back after its AckWait (see answerableLocked)
				}
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
	p.st.dropped.Add(uint64(late))
}

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
	late := 0
	t := now()
	for _, h := range p.held {
		h.gone = true
		if p.answerableLocked(h, t) {
			back = append(back, h)
		} else {
			late++ // it comes back after its AckWait (see answerableLocked)
		}
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
	p.st.dropped.Add(uint64(late))
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
