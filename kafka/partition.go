package kafka

import (
	"context"
)

// partition is the consumer's record of one assigned partition, for one
// assignment (gen): which fetched offsets are still in progress, and so the
// watermark that may be committed. All fields are guarded by Consumer.mu,
// except ctx, which is set once.
//
// Offsets are tracked in fetch order (which is offset order) in a queue of
// entries. An entry is done once its record was handled or dead-lettered
// (or skipped because the commit metadata said so). Done entries at the
// front are popped as soon as they are, so the front entry, when there is
// one, is the lowest offset not done: the watermark. Without entries the
// watermark is one past the last offset fetched. Offsets the broker never
// delivered (compacted, transaction markers) are not in the queue, so they
// never hold the watermark back.
type partition struct {
	topic string
	part  int32
	gen   uint64 // assignment number, part of every session key

	ctx    context.Context // canceled when the partition is lost, or its drain times out
	cancel context.CancelFunc

	entries []entry // offsets fetched and not yet popped, in offset order
	base    uint64  // sequence number of entries[0]
	next    int64   // one past the last offset fetched; -1 before the first
	pending int     // entries not done

	skip    []OffsetRange // done ranges read from the commit metadata at assignment
	skipped int           // records skipped because of skip

	committed     int64  // last offset committed by this member; -1 none
	committedMeta string // metadata of that commit

	keys map[sessionKey]int // sessions with records not done, and how many

	revoking bool          // no more records are taken; waiting to drain
	drained  chan struct{} // closed when pending reaches 0 while revoking
	dead     bool          // revoked or lost: completions are ignored
}

type entry struct {
	offset int64
	done   bool
}

func newPartition(parent context.Context, topic string, part int32, gen uint64) *partition {
	ctx, cancel := context.WithCancel(parent)
	return &partition{
		topic: topic, part: part, gen: gen,
		ctx: ctx, cancel: cancel,
		next: -1, committed: -1,
		keys: make(map[sessionKey]int),
	}
}

// track adds offset o, fetched, and returns its sequence number. It
// returns ok=false for an offset at or below one already tracked (a
// re-delivery), which must be ignored.
func (p *partition) track(o int64) (seq uint64, ok bool) {
	if p.next >= 0 && o < p.next {
		return 0, false
	}
	seq = p.base + uint64(len(p.entries))
	p.entries = append(p.entries, entry{offset: o})
	p.next = o + 1
	p.pending++
	return seq, true
}

// skipped reports whether the commit metadata marked o done.
func (p *partition) isSkipped(o int64) bool {
	for len(p.skip) > 0 && p.skip[0].To <= o {
		p.skip = p.skip[1:]
	}
	return len(p.skip) > 0 && p.skip[0].From <= o
}

// complete marks seq done and pops the done entries at the front.
func (p *partition) complete(seq uint64) {
	i := seq - p.base
	if i >= uint64(len(p.entries)) || p.entries[i].done {
		return
	}
	p.entries[i].done = true
	p.pending--
	k := 0
	for k < len(p.entries) && p.entries[k].done {
		k++
	}
	if k > 0 {
		p.entries = p.entries[k:]
		p.base += uint64(k)
		if len(p.entries) == 0 {
			p.entries = nil // let the old array go
		}
	}
	if p.pending == 0 && p.revoking && p.drained != nil {
		close(p.drained)
		p.drained = nil
	}
}

// watermark returns the offset to commit: every fetched record below it is
// done. It returns -1 when nothing was fetched yet.
func (p *partition) watermark() int64 {
	if len(p.entries) > 0 {
		return p.entries[0].offset
	}
	return p.next
}

// doneAbove returns the done ranges above the watermark, merging done
// entries across offsets that were never delivered.
func (p *partition) doneAbove() []OffsetRange {
	var out []OffsetRange
	for i, e := range p.entries {
		if !e.done {
			continue
		}
		if k := len(out); k > 0 && i > 0 && p.entries[i-1].done {
			out[k-1].To = e.offset + 1
			continue
		}
		out = append(out, OffsetRange{e.offset, e.offset + 1})
	}
	return out
}
