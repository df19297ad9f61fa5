package seqjetstream

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// reply is how a message is resolved.
type reply uint8

const (
	replyAck reply = iota
	replyTerm
	replyNak
)

// resolve sends h's answer to the server, unless h is gone (its epoch
// ended, or it was resolved already) or the partition closed. It reports
// whether h was resolved here: its answer sent or, for an answer that
// might arrive after h's AckWait ran out at the server, withheld (see
// answerableLocked): an Ack or Term for its redelivery, which is logged,
// a Nak for good.
func (p *partition) resolve(h *held, r reply) bool {
	p.gate.RLock()
	p.mu.Lock()
	if h.gone || h.epoch != p.epoch || p.closed {
		p.mu.Unlock()
		p.gate.RUnlock()
		return false
	}
	h.gone = true
	delete(p.held, h.seq)
	t := now()
	late := !p.answerableLocked(h, t)
	if r != replyNak {
		p.resolved.add(h.seq, r == replyTerm)
		if p.group != "" {
			p.applied.add(h.key.key, h.seq, r == replyTerm)
		}
		if late && p.group != "" && len(p.withheld) < p.bound {
			if p.withheld == nil {
				p.withheld = make(map[uint64]time.Time)
			}
			p.withheld[h.seq] = time.Now()
		}
	}
	p.checkDrainedLocked()
	anchor := h.anchor
	p.mu.Unlock()
	if late {
		p.gate.RUnlock()
		p.st.dropped.Add(1)
		if r == replyNak {
			return true
		}
		p.c.logAt(p.c.life, levelWarn, "seqjetstream: answer withheld: the message's AckWait may have run out at the server (this instance stalled); its redelivery gets the answer, or runs again on the partition's new owner",
			"stream", p.stream, "consumer", p.name, "sequence", h.seq, "terminate", r == replyTerm, "late", t.Sub(anchor.Add(p.fresh)))
		return true
	}
	defer p.gate.RUnlock()
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
		p.hb = time.AfterFunc(p.beatEvery, p.beat)
	} else {
		p.hb.Reset(p.beatEvery)
	}
}

// beat sends InProgress for every held message that has been held for
// more than half a tick (on a pinned consumer: whose anchor is more than a
// tick old; beats come every half tick there, so each is refreshed at
// least a tick before its answer window ends), so that none reaches its
// AckWait while queued, running, retrying or held back by a catch-up. On
// a pinned consumer a message past its answer window (see
// answerableLocked) gets none: its AckWait may have run out already, so
// it is left to come back, which renews its window if it comes back
// here. An InProgress that nats.go could not send moves the anchor
// back. It runs on the timer's goroutine and calls no user code.
func (p *partition) beat() {
	defer p.hbWG.Done()
	p.gate.RLock()
	p.mu.Lock()
	p.hbArmed = false
	items := p.hbBuf[:0]
	t := now()
	if p.owned && !p.closed {
		cutoff := t.Add(-p.tick / 2)
		for _, h := range p.held {
			switch {
			case p.group == "":
				if h.at.Before(cutoff) {
					items = append(items, beatItem{h: h})
				}
			case !p.answerableLocked(h, t):
			case p.skipProgress != nil && p.skipProgress(h.seq):
			case h.anchor.Before(t.Add(-p.tick)):
				items = append(items, beatItem{h: h, prev: h.anchor})
				h.anchor = t // before the InProgress goes out
			}
		}
	}
	p.mu.Unlock()
	failed := false
	for i := range items {
		if err := items[i].h.msg.InProgress(); err != nil && p.group != "" {
			items[i].failed, failed = true, true
		}
	}
	p.st.heartbeats.Add(uint64(len(items)))
	p.gate.RUnlock()
	p.mu.Lock()
	if failed {
		for _, it := range items {
			if it.failed && it.h.anchor.Equal(t) {
				it.h.anchor = it.prev
			}
		}
	}
	clear(items)
	p.hbBuf = items[:0]
	p.armLocked()
	p.mu.Unlock()
}

// beatItem is a message beat sends InProgress for, with its anchor before
// (on a pinned consumer), to restore if the InProgress fails.
type beatItem struct {
	h      *held
	prev   time.Time
	failed bool
}

// giveBackDelay is how long a message given back waits on the server
// before its redelivery. Close gives messages back right after it ends
// its pulls, and the server forgets a pull only once the client's
// unsubscribe reaches it: a message redelivered at once could go to that
// dead pull, and come back only after its AckWait.
const giveBackDelay = 500 * time.Millisecond

// giveBack returns m to the server for redelivery (a Nak).
func giveBack(m jetstream.Msg) { _ = m.NakWithDelay(giveBackDelay) }
