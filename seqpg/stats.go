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
	// LeaseExpired counts keys the worker gave up, without giving them
	// back, because their lease expired locally before it was renewed
	// (the database refused or delayed the renewals, or the process was
	// frozen). Each such key stalls until its lease runs out in the
	// database, up to one WithLease, and each is logged at Warn.
	LeaseExpired uint64
	DBErrors     uint64 // database errors logged and retried

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
		Leased:       leased,
		Claimed:      w.n.claimed.Load(),
		Completed:    w.n.completed.Load(),
		Retried:      w.n.retried.Load(),
		DeadLettered: w.n.deadLettered.Load(),
		Halted:       w.n.halted.Load(),
		LeaseLost:    w.n.leaseLost.Load(),
		LeaseExpired: w.n.leaseExpired.Load(),
		DBErrors:     w.n.errs.Load(),
		Scheduler:    w.sched.Stats(),
	}
}
