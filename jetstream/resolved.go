package jetstream

// resolvedSet remembers the last resolved stream sequences of a partition
// (up to a fixed number, oldest forgotten first) and whether each was
// terminated, so that a redelivery of one whose answer was lost is
// answered again without running its handler. Its size does not depend
// on the number of keys.
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
