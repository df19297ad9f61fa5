package seqpg

import "github.com/seqsched/seqsched"

// Stats is a snapshot of a worker, from Worker.Stats. The counters only
// grow over the worker's life; Leased is a gauge.
type Stats struct {
	Leased       int    // keys the worker holds now
	Claimed      uint64 // leases taken
	Completed    uint64 // jobs whose completion committed
	Retried      uint64 // failed attempts that will be retried
	DeadLettered uint64 // jobs moved to seqpg_dead
	Halted       uint64 // keys halted by WithHaltOnError
	LeaseLost    uint64 // outcomes refused because the lease was lost (ErrLeaseLost)
	// LeaseExpired counts keys whose lease expired locally, between two
	// of their jobs, before it was renewed (the database refused or
	// delayed the renewals, or the process was frozen): each is logged at
	// Warn and given back, free at once for any worker unless another
	// has taken it since.
	LeaseExpired uint64
	// LeaseExpiredRunning counts jobs whose handler returned after their
	// lease expired locally, in the default mode: the job's transaction
	// was rolled back (the job runs again under the key's next lease),
	// and each is logged at Warn and its key given back, as for
	// LeaseExpired.
	LeaseExpiredRunning uint64
	DBErrors            uint64 // database errors logged and retried

	// Scheduler is the in-process scheduler's own Stats: sessions (keys),
	// queue and run times.
	Scheduler seqsched.Stats
}

// Stats returns a snapshot of the worker's counters. It is safe to call
// at any time, from any goroutine.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	leased := len(w.leases)
	w.mu.Unlock()
	return Stats{
		Leased:              leased,
		Claimed:             w.n.claimed.Load(),
		Completed:           w.n.completed.Load(),
		Retried:             w.n.retried.Load(),
		DeadLettered:        w.n.deadLettered.Load(),
		Halted:              w.n.halted.Load(),
		LeaseLost:           w.n.leaseLost.Load(),
		LeaseExpired:        w.n.leaseExpired.Load(),
		LeaseExpiredRunning: w.n.leaseExpiredRunning.Load(),
		DBErrors:            w.n.errs.Load(),
		Scheduler:           w.sched.Stats(),
	}
}
