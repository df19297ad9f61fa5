package seqsched

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Checks the package's own tests switch on (export_test.go); off, each
// costs a predictable branch.
//
// checkTokens makes every release check that the live tokens cover the
// workers still running and the sessions waiting in the ready queue (each
// holds one), and count in tokenViolations each time they do not;
// Scheduler.slack keeps tokens minus both in one counter, so that the
// check reads one consistent value, and is 0 once the scheduler is quiet.
//
// checkLocks makes the shard and slots locks record which goroutine holds
// them, and try count in lockViolations every call of user code made while
// the calling goroutine holds one (see callsite.go: user code never runs
// under a lock). It costs a stack read per lock, so tests turn it on only
// around the code they check.
//
// shutdownClosedHook, if set, runs in Shutdown between setting closed and
// its barrier: a test stops there to show that the scheduler does not go
// quiet before the barrier. releaseHook, if set, runs in release (under
// checkTokens) once the tokens are given back, with the scheduler and the
// count left, before release decides whether the scheduler is quiet: a
// test stops there to show that the decision does not read a count that
// has moved since.
var (
	shutdownClosedHook func()
	releaseHook        atomic.Pointer[func(s any, left int64)] // atomic: a worker of an earlier test may still be in release

	checkTokens     bool
	tokenViolations atomic.Int64
	firstViolation  atomic.Pointer[string] // the stack of the first token violation

	checkLocks     atomic.Bool
	lockViolations atomic.Int64
	lockChecked    atomic.Int64 // calls of user code the check looked at
	holders        struct {
		mu   sync.Mutex
		held map[uint64]int // locks held, by goroutine id
	}
)

// lockedUserCode records a lock violation if the calling goroutine holds
// a lock of the package.
func lockedUserCode() {
	lockChecked.Add(1)
	holders.mu.Lock()
	n := holders.held[goid()]
	holders.mu.Unlock()
	if n > 0 {
		lockViolations.Add(1)
	}
}

// locked and unlocked record that the calling goroutine took or released
// a lock of the package; called under checkLocks only.
func locked() {
	holders.mu.Lock()
	if holders.held == nil {
		holders.held = map[uint64]int{}
	}
	holders.held[goid()]++
	holders.mu.Unlock()
}

func unlocked() {
	holders.mu.Lock()
	id := goid()
	if holders.held[id]--; holders.held[id] <= 0 {
		delete(holders.held, id)
	}
	holders.mu.Unlock()
}

// goid is the calling goroutine's id, read from its stack trace (slow: for
// checks only).
func goid() uint64 {
	var buf [40]byte
	n := runtime.Stack(buf[:], false)
	var id uint64
	for _, c := range buf[len("goroutine "):n] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}

// mutex is the package's lock: a sync.Mutex that, under checkLocks,
// records its holder.
type mutex struct{ m sync.Mutex }

func (l *mutex) Lock() {
	l.m.Lock()
	if checkLocks.Load() {
		locked()
	}
}

func (l *mutex) Unlock() {
	if checkLocks.Load() {
		unlocked()
	}
	l.m.Unlock()
}

// tokenViolation counts a token violation and keeps the stack of the
// first one, for the test that finds it to print.
func tokenViolation() {
	if tokenViolations.Add(1) == 1 {
		buf := make([]byte, 16<<10)
		st := string(buf[:runtime.Stack(buf, false)])
		firstViolation.Store(&st)
	}
}
