package seqkafka

// window bounds one partition's records taken and not done, in the shape
// of semaphore.Weighted: a record takes a place if one is free and no
// record waits, else it waits, in offset order; a record done releases its
// place, which goes to the first waiter. Nothing blocks: a waiter is a
// job not yet submitted, which the caller submits when it is granted a
// place (see Consumer.admitLocked), because the poll loop cannot wait for
// one partition without stalling the others.
//
// Waiters are records a poll brought beyond the bound: they are in memory
// anyway, so holding them costs nothing more. A partition with waiters is
// behind: the poll loop takes no more of its records (see readyToPoll).
// While every partition is behind it simply stops polling; kgo then keeps
// what it has buffered and fetches no more. Only when a partition is behind
// and others are not does it stop the partition's fetching (kgo's
// PauseFetchPartitions, which drops the partition's buffered fetch, to be
// read again on resume: costly if frequent), until no record waits and at
// most low are taken. A partition thus holds at most high records taken
// plus one poll's worth waiting. The partition's mu guards the window.
type window struct {
	high, low int
	n         int    // records taken and not done
	waiting   []*job // records fetched beyond the bound, in offset order, from head on
	head      int
	stopped   bool // fetching stopped by this window
}

func newWindow(high, low int) window { return window{high: high, low: low} }

// pollChunk is how many records one poll takes at most, for the bound
// (high, low): enough to amortize a poll, small enough that what waits
// beyond the bound stays a fraction of it.
func pollChunk(high, low int) int { return max(1, (high-low)/2) }

// wait queues j behind the records already waiting.
func (w *window) wait(j *job) { w.waiting = append(w.waiting, j) }

// next returns the first waiter once a place is free for it, or nil. The
// caller takes the place (take) unless the record needs none (skipped).
func (w *window) next() *job {
	if w.head == len(w.waiting) || w.n >= w.high {
		return nil
	}
	j := w.waiting[w.head]
	w.waiting[w.head] = nil
	if w.head++; w.head == len(w.waiting) {
		w.waiting, w.head = w.waiting[:0], 0 // the array is kept for the next poll
	}
	return j
}

func (w *window) take()    { w.n++ }
func (w *window) release() { w.n-- }

// behind reports whether records wait beyond the bound.
func (w *window) behind() bool { return w.head < len(w.waiting) }

// resume reports whether the partition may fetch again now: no record
// waits and at most low are taken.
func (w *window) resume() bool {
	if w.stopped && !w.behind() && w.n <= w.low {
		w.stopped = false
		return true
	}
	return false
}

// buffered returns the records fetched and not done: taken or waiting.
func (w *window) buffered() int { return w.n + len(w.waiting) - w.head }

// forget drops the waiters (the partition is revoked: they were never
// taken, so its next owner reads them again).
func (w *window) forget() { w.waiting, w.head = nil, 0 }
