package ledger

import (
	"slices"
	"sync"
	"time"
)

// Stats summarises the operations a Bank has completed.
type Stats struct {
	Ops      int           // operations completed (committed or failed)
	Failed   int           // of Ops, those that returned an error
	P50, P99 time.Duration // latency from submission to completion
	Max      time.Duration
}

// recorder collects latencies. It keeps every sample: fine for a demo's
// thousands of operations.
type recorder struct {
	mu      sync.Mutex
	samples []time.Duration
	failed  int
}

func (r *recorder) observe(d time.Duration, err error) {
	r.mu.Lock()
	r.samples = append(r.samples, d)
	if err != nil {
		r.failed++
	}
	r.mu.Unlock()
}

func (r *recorder) snapshot() Stats {
	r.mu.Lock()
	s := slices.Clone(r.samples)
	st := Stats{Ops: len(s), Failed: r.failed}
	r.mu.Unlock()
	if len(s) == 0 {
		return st
	}
	slices.Sort(s)
	st.P50 = s[len(s)*50/100]
	st.P99 = s[len(s)*99/100]
	st.Max = s[len(s)-1]
	return st
}
