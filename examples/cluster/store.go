package main

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Message is one session message as a node sees it after delivery.
type Message struct {
	Session   string    // the session ID, the last token of the subject
	Partition int       // the partition the subject mapping put it in
	High      bool      // sent with the priority header
	Seq       uint64    // the producer's counter for this session and lane: 1, 2, 3, ...
	StreamSeq uint64    // JetStream stream sequence (diagnostics)
	Sent      time.Time // when the producer published it (latency only)
}

// Record is the applied state of one session, as a database row would hold
// it. The last applied sequence of each lane is stored in the same row as
// the state it produced, and both change in one transaction: that is what
// makes a redelivered message harmless and an early one detectable.
type Record struct {
	LastNormal uint64 // Seq of the last applied Normal message
	LastHigh   uint64 // Seq of the last applied High message
	Applied    int    // messages applied: the "state" of this example
}

// Outcome is what [Store.Apply] did with a message.
type Outcome int

const (
	// Applied: the message was the next of its session's lane.
	Applied Outcome = iota
	// Duplicate: already applied (a redelivery); acknowledge it again.
	Duplicate
	// Early: a predecessor in its lane is not applied yet. JetStream does
	// not redeliver in stream order, so after a failover a message can
	// arrive before the one it follows; it must come back later.
	Early
)

// Store stands in for the application's database: one Record per session,
// changed by [Store.Apply] in a transaction. It also keeps an audit of every
// application, used only to verify the run (order, duplicates, latency); a
// real application has the Records alone. Safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	records map[string]*Record
	audit   audit
	applied int // messages applied, all sessions
	dups    int // deliveries recognised as already applied
	early   int // deliveries that came before a predecessor
	waiters []waiter

	onApplied func(applied int) // tests: called after each application, outside mu
}

type waiter struct {
	n    int
	done chan struct{}
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{records: make(map[string]*Record), audit: audit{sessions: make(map[string]*trail)}}
}

// Apply applies m to its session's record if m is the next message of its
// lane (m.Seq is the lane's last applied Seq plus one); otherwise it leaves
// the record alone and says why. The check and the change are one atomic
// step, so two nodes racing on one session (a failover while the old owner
// still runs) cannot both apply a message or apply one out of order. The
// lanes have separate sequences because a High message is meant to overtake
// Normal ones.
func (st *Store) Apply(m Message) Outcome {
	out, applied := st.apply(m)
	if out == Applied && st.onApplied != nil {
		st.onApplied(applied)
	}
	return out
}

// apply is Apply under the lock; it also returns the count of messages
// applied so far.
func (st *Store) apply(m Message) (Outcome, int) {
	now := time.Now()
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.records[m.Session]
	if r == nil {
		r = &Record{}
		st.records[m.Session] = r
	}
	last := &r.LastNormal
	if m.High {
		last = &r.LastHigh
	}
	switch {
	case m.Seq <= *last:
		st.dups++
		return Duplicate, st.applied
	case m.Seq > *last+1:
		st.early++
		return Early, st.applied
	}
	*last = m.Seq
	r.Applied++
	st.audit.record(m, now)
	st.applied++
	st.waiters = slices.DeleteFunc(st.waiters, func(w waiter) bool {
		if st.applied >= w.n {
			close(w.done)
			return true
		}
		return false
	})
	return Applied, st.applied
}

// Wait returns nil once n messages have been applied in all, or ctx.Err()
// if ctx ends first.
func (st *Store) Wait(ctx context.Context, n int) error {
	st.mu.Lock()
	if st.applied >= n {
		st.mu.Unlock()
		return nil
	}
	w := waiter{n: n, done: make(chan struct{})}
	st.waiters = append(st.waiters, w)
	st.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Record returns a copy of session's record.
func (st *Store) Record(session string) Record {
	st.mu.Lock()
	defer st.mu.Unlock()
	if r := st.records[session]; r != nil {
		return *r
	}
	return Record{}
}

// History returns session's applied messages in the order they were
// applied, as "N3" (the third Normal) or "H1" (the first High).
func (st *Store) History(session string) []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	if t := st.audit.sessions[session]; t != nil {
		return slices.Clone(t.order)
	}
	return nil
}

// Report is what the audit found.
type Report struct {
	Applied    int           // messages applied
	Skipped    int           // deliveries acknowledged without applying: already applied
	Early      int           // deliveries sent back because a predecessor was missing
	Violations int           // applications out of producer order within a session's lane (must be 0)
	Duplicates int           // messages applied more than once (must be 0)
	P50, P99   time.Duration // end-to-end latency, publish to applied
	Last       time.Time     // when the last message was applied
}

// Report returns the audit's findings so far.
func (st *Store) Report() Report {
	st.mu.Lock()
	defer st.mu.Unlock()
	a := &st.audit
	rep := Report{Applied: st.applied, Skipped: st.dups, Early: st.early, Violations: a.violations,
		Duplicates: a.duplicates, Last: a.last}
	if n := len(a.latencies); n > 0 {
		l := slices.Clone(a.latencies)
		slices.Sort(l)
		rep.P50 = l[n/2]
		rep.P99 = l[min(n-1, n*99/100)]
	}
	return rep
}

// audit verifies the run from the outside: it records every application
// and counts what a correct run never does.
type audit struct {
	sessions   map[string]*trail
	violations int
	duplicates int
	latencies  []time.Duration
	last       time.Time
}

type trail struct {
	order      []string        // applications in order: "N1", "H1", "N2", ...
	seen       map[string]bool // applications so far
	lastNormal uint64
	lastHigh   uint64
}

func (a *audit) record(m Message, now time.Time) {
	t := a.sessions[m.Session]
	if t == nil {
		t = &trail{seen: make(map[string]bool)}
		a.sessions[m.Session] = t
	}
	lane, last := "N", &t.lastNormal
	if m.High {
		lane, last = "H", &t.lastHigh
	}
	id := lane + strconv.FormatUint(m.Seq, 10)
	switch {
	case t.seen[id]:
		a.duplicates++
	case m.Seq != *last+1:
		a.violations++
	}
	t.seen[id] = true
	*last = max(*last, m.Seq)
	t.order = append(t.order, id)
	if !m.Sent.IsZero() {
		a.latencies = append(a.latencies, now.Sub(m.Sent))
	}
	a.last = now
}
