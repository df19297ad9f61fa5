package seqkafka

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// partition is the consumer's record of one assigned partition, for one
// assignment (gen): which records are taken and not done, hence the
// watermark and the done ranges that may be committed, and the window that
// bounds them. mu guards every field below it; the fields above are set
// once.
//
// Progress is what the commit says: the watermark W (every record below it
// is done) and the done ranges above it. Both follow from the offsets taken
// and not done (offsets): between two consecutive ones, and from the last
// to next, everything is done, either handled or never delivered (compacted
// away, a transaction marker), which a commit may pass just the same. So
// memory is bounded by the records not done, which the window bounds, not
// by the records seen. The done ranges a previous owner left in the commit
// metadata (inherited) are kept too, above next, until they are fetched:
// an owner that commits before fetching them (held back by its window,
// revoked quickly) still passes them on.
type partition struct {
	topic  string
	part   int32
	gen    uint64             // assignment number, part of every session key
	ctx    context.Context    // canceled when the partition is lost, its drain times out, or Close gives up
	cancel context.CancelFunc //
	stop   chan struct{}      // closed when revocation begins: records waiting out a Pause give up
	gone   chan struct{}      // closed when the partition is forgotten (revoked or lost)
	counts *partCounters      // this (topic, partition)'s counters over the consumer's life

	mu        sync.Mutex
	offs      offsets
	inherited []OffsetRange // done ranges from the commit metadata, trimmed as records are fetched
	polled    int64         // one past the last offset a poll brought; -1 before one
	win       window
	open      int                // records taken and not settled (done or given back); revocation drains to 0
	keys      map[sessionKey]int // sessions with records taken and not settled, and how many
	batch     *batch             // the batch records join (NewBatchConsumer)
	batchSeq  uint64             // batches made, for their session keys
	hwm       int64              // the partition's high watermark at the last fetch; -1 before one

	committed     int64  // last offset committed (or found committed at assignment); -1 none
	committedMeta string // metadata of that commit

	revoking bool          // no more records are taken; waiting to drain
	drained  chan struct{} // closed when open reaches 0 while revoking, or when forgotten
	dead     bool          // revoked or lost: settlements change nothing
}

// partCounters are one (topic, partition)'s counters, kept over the
// consumer's life (every assignment of it adds to the same ones), so that
// they only grow, as a metrics system expects of counters.
type partCounters struct {
	processed, retries, deadLettered, skipped atomic.Uint64
	inFlight                                  atomic.Int64
}

func newPartition(parent context.Context, k tp, gen uint64, counts *partCounters, high, low int) *partition {
	ctx, cancel := context.WithCancel(parent)
	return &partition{
		topic: k.topic, part: k.part, gen: gen,
		ctx: ctx, cancel: cancel, stop: make(chan struct{}), gone: make(chan struct{}), counts: counts,
		offs:      offsets{next: -1},
		polled:    -1,
		win:       newWindow(high, low),
		keys:      make(map[sessionKey]int),
		hwm:       -1,
		committed: -1,
	}
}

// inheritedDone reports whether the commit metadata marked o done, and
// forgets the inherited ranges below o. Offsets come in increasing order.
func (p *partition) inheritedDone(o int64) bool {
	for len(p.inherited) > 0 && p.inherited[0].To <= o {
		p.inherited = p.inherited[1:]
	}
	return len(p.inherited) > 0 && p.inherited[0].From <= o
}

// progress returns what a commit of p would say now: the watermark (-1
// before anything was fetched) and the done ranges above it.
func (p *partition) progress() (wm int64, done []OffsetRange) {
	t := &p.offs
	if t.next < 0 {
		return -1, nil
	}
	wm = t.watermark()
	done = t.doneAbove(nil)
	for _, r := range p.inherited {
		if r.To <= t.next {
			continue
		}
		r.From = max(r.From, t.next)
		if n := len(done); n > 0 && done[n-1].To >= r.From {
			done[n-1].To = r.To
			continue
		}
		done = append(done, r)
	}
	// With nothing pending the watermark is next, and an inherited range
	// that starts there moves it (ranges are never adjacent).
	if len(done) > 0 && done[0].From <= wm {
		wm, done = done[0].To, done[1:]
	}
	return wm, done
}

// watermark is progress's watermark, without the ranges.
func (p *partition) watermark() int64 {
	t := &p.offs
	if t.next < 0 {
		return -1
	}
	if t.head < len(t.list) {
		return t.list[t.head].o
	}
	for _, r := range p.inherited {
		if r.To > t.next {
			if r.From <= t.next {
				return r.To
			}
			break
		}
	}
	return t.next
}

// settle ends the record at offset o of session sk: done (handled or
// dead-lettered) or given back (left not done, for the next owner).
func (p *partition) settle(o int64, sk sessionKey, done bool) {
	p.releaseKey(sk)
	if p.dead {
		return
	}
	p.open--
	if done {
		p.offs.done(o)
		p.win.release()
	}
	if p.open == 0 && p.revoking && p.drained != nil {
		close(p.drained)
		p.drained = nil
	}
}

func (p *partition) releaseKey(sk sessionKey) {
	if n := p.keys[sk]; n > 1 {
		p.keys[sk] = n - 1
	} else {
		delete(p.keys, sk)
	}
}

// offsets holds a partition's offsets taken and not done, in increasing
// order. Done ones are marked and dropped from the front at once, and from
// the middle once they are half the list, so the list never holds more
// than twice the offsets not done (plus a few); its array is reused.
type offsets struct {
	list  []offset // from head on
	head  int
	ndone int   // done entries in list[head:]
	next  int64 // one past the last offset fetched; -1 before the first
}

type offset struct {
	o    int64
	done bool
}

// advance moves next past o and reports whether o is new (not at or below
// an offset fetched before: a redelivery, to be ignored).
func (t *offsets) advance(o int64) bool {
	if t.next >= 0 && o < t.next {
		return false
	}
	t.next = o + 1
	return true
}

// add tracks o, just advanced past, as not done.
func (t *offsets) add(o int64) { t.list = append(t.list, offset{o: o}) }

// pending returns how many offsets are not done.
func (t *offsets) pending() int { return len(t.list) - t.head - t.ndone }

// done marks o done.
func (t *offsets) done(o int64) {
	live := t.list[t.head:]
	i, ok := slices.BinarySearchFunc(live, o, func(e offset, o int64) int {
		switch {
		case e.o < o:
			return -1
		case e.o > o:
			return 1
		}
		return 0
	})
	if !ok || live[i].done {
		return
	}
	live[i].done = true
	t.ndone++
	for t.head < len(t.list) && t.list[t.head].done {
		t.head++
		t.ndone--
	}
	switch live = t.list[t.head:]; {
	case len(live) == 0:
		t.list, t.head = t.list[:0], 0
	case t.ndone > 16 && 2*t.ndone > len(live):
		live = slices.DeleteFunc(live, func(e offset) bool { return e.done })
		t.list, t.head, t.ndone = t.list[:copy(t.list, live)], 0, 0
	case t.head > len(t.list)/2:
		t.list, t.head = t.list[:copy(t.list, live)], 0
	}
}

// watermark returns the lowest offset not done: the first in the list
// (never a done one), else next.
func (t *offsets) watermark() int64 {
	if t.head < len(t.list) {
		return t.list[t.head].o
	}
	return t.next
}

// doneAbove appends to out the done ranges above the watermark: the gaps
// between offsets not done, and from the last one to next.
func (t *offsets) doneAbove(out []OffsetRange) []OffsetRange {
	prev := int64(-1)
	for _, e := range t.list[t.head:] {
		if e.done {
			continue
		}
		if prev >= 0 && e.o > prev+1 {
			out = append(out, OffsetRange{prev + 1, e.o})
		}
		prev = e.o
	}
	if prev >= 0 && t.next > prev+1 {
		out = append(out, OffsetRange{prev + 1, t.next})
	}
	return out
}
