package seqjetstream

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// A partition recognises a redelivery of a message it already answered
// (the answer was lost on the way) with two memories, both of a fixed
// size whatever the backlog and however many keys are seen:
//
//   - resolvedSet, the last resolved stream sequences, each with its
//     answer: a redelivery of one is answered the same way (Ack or Term).
//     It serves every consumer.
//   - appliedKeys, per key the highest stream sequence resolved (acked
//     after its handler returned nil, or terminated) in the current epoch
//     of a pinned consumer. Every delivery under the epoch's pin is its
//     own, and its catch-ups (at the start, and after a delivery lost on
//     its way) keep a key's later messages waiting for any earlier one
//     still out; so a message first delivered in the epoch, at or below
//     its key's remembered sequence and not held, was resolved here
//     already, and is acked (or terminated, if it is that very sequence
//     and it was). A message first delivered before the epoch is left to
//     the sequence rule: it may have been with a previous owner that
//     stalled, whose late answers can end a catch-up early (see
//     resolvedLocked). The memory ends with its epoch: a later
//     owner, or this instance pinned again, starts empty, for a message
//     the lost epoch dropped unrun may come back behind a later one of its
//     key that it ran (a High one).
//
// appliedKeys is not used for a plain consumer: several instances may
// share one, and a message that one of them held when it died comes back
// after later messages of its key that another applied. A lower sequence
// there proves nothing, and taking it for a duplicate would lose it.
//
// Both hold 4 × WithMaxBuffered entries, a few times what a consumer
// holds at once, so that a redelivery after a lost answer (AckWait
// later) usually finds its entry; the key memory forgets the key updated
// least recently. Past that, a redelivery runs its handler again, which
// at-least-once delivery allows.
//
// Keys are the publishers' (a subject, a header, what a key function
// makes of a message), so the key memory is bounded in bytes too: a key
// longer than maxKeyBytes is remembered by its SHA-256 digest (see
// memKey), a fixed maxKeyBytes+1 bytes, and an entry costs at most that
// plus its fixed overhead, whatever the keys. Remembered forms of short
// and long keys differ in length, so they never meet; two long keys
// meet only if SHA-256 collides, which no publisher can arrange.

// resolvedLocked reports whether h, a redelivery not held, was resolved
// here already, and whether it was terminated: by its sequence, or, on a
// pinned consumer, by its key's highest resolved sequence in this epoch
// (see above). A first delivery was not, whatever the memories say: the
// server delivers a message a first time again only after the consumer
// was reset, and such a replay runs. Called with mu held.
//
// The key rule is kept to messages first delivered in this epoch (at or
// above own, for first deliveries come in stream order): a message
// delivered before it may have been with a previous owner that stalled,
// and answers of such an owner can end a catch-up early (see the package
// doc), so one of them may come back after a later message of its key
// ran here without ever having run itself. For the same reason a
// delivery of this epoch lost on its way (a gap in the consumer
// sequence) moves own past it (noteDeliveryLocked): a late answer during
// the catch-up that waits for it may end that catch-up early, and the
// lost message then comes back after later ones of its key; it runs,
// late, rather than being acknowledged unrun.
func (p *partition) resolvedLocked(h *held) (termed, ok bool) {
	if h.first {
		// Never delivered before, so never answered: a replay after the
		// consumer was reset (see noteReplayLocked), which must run.
		return false, false
	}
	if termed, ok := p.resolved.get(h.seq); ok {
		return termed, true
	}
	if p.group == "" || p.own == 0 || h.seq < p.own {
		return false, false
	}
	seq, termed, ok := p.applied.get(h.key.key)
	switch {
	case !ok || h.seq > seq:
		return false, false
	case h.seq == seq:
		return termed, true
	}
	return false, true // an earlier message of its key: its own answer is forgotten
}

// resolvedSet remembers the last resolved stream sequences of a partition
// (up to a fixed number, oldest forgotten first) and whether each was
// terminated.
type resolvedSet struct {
	ring  []uint64
	head  int             // oldest entry, once the ring is full
	kinds map[uint64]bool // sequence → terminated
}

func (r *resolvedSet) init(n int) {
	r.ring = make([]uint64, 0, n)
	r.kinds = make(map[uint64]bool, n)
}

func (r *resolvedSet) add(seq uint64, termed bool) {
	if _, ok := r.kinds[seq]; ok {
		r.kinds[seq] = termed
		return
	}
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, seq)
	} else {
		delete(r.kinds, r.ring[r.head])
		r.ring[r.head] = seq
		r.head = (r.head + 1) % len(r.ring)
	}
	r.kinds[seq] = termed
}

func (r *resolvedSet) get(seq uint64) (termed, ok bool) {
	termed, ok = r.kinds[seq]
	return termed, ok
}

func (r *resolvedSet) len() int { return len(r.kinds) }

// reset forgets every sequence, keeping the room.
func (r *resolvedSet) reset() {
	r.ring, r.head = r.ring[:0], 0
	clear(r.kinds)
}

// maxKeyBytes is the longest key the key memory keeps as it is.
const maxKeyBytes = 64

// memKey is the form of key the key memory keeps: key itself, up to
// maxKeyBytes, or else "#" and the hex SHA-256 of key (maxKeyBytes+1
// bytes), so that no key costs more than that, and no remembered form of
// a long key is the form of a short one.
func memKey(key string) string {
	if len(key) <= maxKeyBytes {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "#" + hex.EncodeToString(sum[:])
}

// appliedKeys remembers, for up to max keys, the highest stream sequence
// resolved per key and whether it was terminated; when full, the key
// updated least recently is forgotten. Its entries live in one slice
// linked in update order by index, so that a key costs no allocation but
// its own copy once the slice has grown to max. Each key is kept in the
// form memKey gives, copied, so that no entry holds more than
// maxKeyBytes+1 bytes of key.
type appliedKeys struct {
	max   int
	index map[string]int32 // key → its entry
	ents  []keyEntry
	lru   int32 // the entry updated least recently; -1 when empty
	mru   int32 // the entry updated most recently; -1 when empty
}

type keyEntry struct {
	key        string
	seq        uint64
	termed     bool
	prev, next int32 // towards lru, towards mru; -1 at either end
}

func (a *appliedKeys) init(n int) {
	a.max, a.lru, a.mru = n, -1, -1
	a.index = make(map[string]int32)
}

// add records that seq of key was resolved; a lower seq than the one
// remembered leaves the entry as it is (a High message overtook it) but
// refreshes it.
func (a *appliedKeys) add(key string, seq uint64, termed bool) {
	key = memKey(key)
	i, ok := a.index[key]
	switch {
	case ok:
		a.unlink(i)
		if e := &a.ents[i]; seq > e.seq {
			e.seq, e.termed = seq, termed
		}
	case len(a.ents) < a.max:
		key = strings.Clone(key) // not a window on a larger string (a key function's)
		i = int32(len(a.ents))
		a.ents = append(a.ents, keyEntry{key: key, seq: seq, termed: termed})
		a.index[key] = i
	default: // full: reuse the least recently updated entry
		key = strings.Clone(key)
		i = a.lru
		a.unlink(i)
		delete(a.index, a.ents[i].key)
		a.ents[i] = keyEntry{key: key, seq: seq, termed: termed}
		a.index[key] = i
	}
	a.link(i)
}

// get returns the highest sequence resolved for key, and whether it was
// terminated.
func (a *appliedKeys) get(key string) (seq uint64, termed, ok bool) {
	i, ok := a.index[memKey(key)]
	if !ok {
		return 0, false, false
	}
	return a.ents[i].seq, a.ents[i].termed, true
}

// reset forgets every key (the epoch ended), keeping the slice's room.
func (a *appliedKeys) reset() {
	clear(a.index)
	clear(a.ents) // drop the key strings
	a.ents = a.ents[:0]
	a.lru, a.mru = -1, -1
}

func (a *appliedKeys) len() int { return len(a.index) }

// unlink takes entry i out of the update order.
func (a *appliedKeys) unlink(i int32) {
	e := &a.ents[i]
	if e.prev >= 0 {
		a.ents[e.prev].next = e.next
	} else {
		a.lru = e.next
	}
	if e.next >= 0 {
		a.ents[e.next].prev = e.prev
	} else {
		a.mru = e.prev
	}
	e.prev, e.next = -1, -1
}

// link makes entry i the most recently updated.
func (a *appliedKeys) link(i int32) {
	e := &a.ents[i]
	e.prev, e.next = a.mru, -1
	if a.mru >= 0 {
		a.ents[a.mru].next = i
	} else {
		a.lru = i
	}
	a.mru = i
}
