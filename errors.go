package seqsched

import (
	"errors"
	"fmt"
	"strings"

	"github.com/seqsched/seqsched/internal/opterr"
)

// Sentinel errors. Every error the package itself returns wraps one of these
// (or is a context error returned unchanged), so callers can test with
// [errors.Is]. A future also resolves with what its task's fn returned,
// unchanged, or, when fn panicked, with a [*PanicError], which callers test
// with [errors.As].
var (
	// ErrClosed is returned by Submit after [Scheduler.Shutdown] or
	// [Scheduler.Close] has begun, resolves every task that a give-up
	// (Close, or a Shutdown whose ctx ended) dropped, and is returned by
	// Remove and Discard after a give-up: accepted tasks may have been
	// dropped.
	ErrClosed = errors.New("seqsched: scheduler closed")

	// ErrSessionClosing is wrapped by the [*SessionError] that Submit, Go
	// and Post return for a key whose session is being drained or
	// discarded (Remove, Discard, the last handle's Close), and that a
	// closed handle returns.
	ErrSessionClosing = errors.New("seqsched: session closing")

	// ErrDiscarded resolves every task that [Scheduler.Discard] dropped
	// without running it, and is what [Cause] returns for the ctx of the
	// task that was running when Discard ended its session.
	ErrDiscarded = errors.New("seqsched: discarded")

	// ErrQueueFull is returned by Submit when the session's queue for the
	// task's priority already holds the WithMaxQueue limit (unless the task
	// is submitted with [WaitForRoom], which waits for room instead).
	ErrQueueFull = errors.New("seqsched: queue full")

	// ErrWouldDeadlock is returned by a call that would wait for its own
	// caller, which could never end: [Scheduler.Remove],
	// [Scheduler.Discard], [Session.Close], [Session.Discard] or
	// [Future.Await] for work of the session whose task or callback calls
	// it, and [Scheduler.Shutdown] from any task or callback of its
	// scheduler. The caller is known by the ctx it passes, and by nothing
	// else: a task's ctx (or one derived from it), or the ctx a callback
	// was given (see [WithErrorHandler]). Remove, Discard, Close and
	// Shutdown have done the rest of their work when they return it.
	ErrWouldDeadlock = errors.New("seqsched: would deadlock")

	// ErrInvalidOption is wrapped by the [*OptionError] that New and Submit
	// return for an out-of-range option.
	ErrInvalidOption = errors.New("seqsched: invalid option")

	// ErrNilFunc is returned by Submit, Go and Post (by key or through a
	// handle) when fn is nil.
	ErrNilFunc = errors.New("seqsched: nil func")

	// ErrNilContext is returned when a nil context.Context is passed where
	// one is required.
	ErrNilContext = errors.New("seqsched: nil context")

	// ErrInvalidKey is wrapped by the [*KeyError] that Submit, Go, Post,
	// Open, Remove, Discard, Pause and Resume return for a key that a map
	// cannot hold: one that is not equal to
	// itself (a NaN, or a struct, array or interface holding one) or, in an
	// interface, a value whose type is not comparable (a slice, a map, a
	// func, or a struct holding one).
	ErrInvalidKey = errors.New("seqsched: invalid key")

	// ErrNotNew is returned by the methods of a nil or zero Scheduler, of a
	// nil or zero *Session, and by Await of a nil or zero *Future: make
	// them with [New], [Scheduler.Open] and Submit.
	ErrNotNew = errors.New("seqsched: not made by New")

	// ErrGoexit resolves the future of a task that called runtime.Goexit
	// (for example through t.FailNow in a test). The session continues.
	ErrGoexit = errors.New("seqsched: task called runtime.Goexit")

	// ErrReplaced resolves a queued task that a newer task with the same
	// [Replace] tag took the place of; it never ran.
	ErrReplaced = errors.New("seqsched: replaced")

	// ErrHalted is wrapped by the [*HaltError] that reports a session
	// halted by a failed [HaltOnError] task.
	ErrHalted = errors.New("seqsched: session halted")
)

// OptionError reports an option whose value is out of range. It wraps
// [ErrInvalidOption].
//
// Option is the option as written, e.g. "WithYieldAfter(5)"; Reason, what
// the value must be, e.g. "must be 10..50".
// Error returns "seqsched: <Option>: <Reason>: invalid option".
type OptionError = opterr.Error[optionModule]

// optionModule makes OptionError this package's: its name opens the
// message, and it wraps ErrInvalidOption.
type optionModule struct{}

func (optionModule) Name() string    { return "seqsched" }
func (optionModule) Sentinel() error { return ErrInvalidOption }

// KeyError reports a key that cannot name a session. It wraps
// [ErrInvalidKey].
type KeyError struct {
	Key    any    // the key as given
	Reason string // why it cannot be used, e.g. "is not equal to itself (a NaN)"
}

// Error returns "seqsched: key <Key>: <Reason>: invalid key".
func (e *KeyError) Error() string {
	return fmt.Sprintf("seqsched: key %v: %s: invalid key", e.Key, e.Reason)
}

// Unwrap returns [ErrInvalidKey].
func (e *KeyError) Unwrap() error { return ErrInvalidKey }

// PanicError is the error a future resolves with when its task panicked. The
// panic is recovered, logged, and the session goes on with its next task.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the panicking goroutine's stack, as runtime/debug.Stack
}

// Error returns "seqsched: task panicked: <Value>"; the stack is in Stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("seqsched: task panicked: %v", e.Value)
}

// Unwrap returns Value when it is an error, so errors.Is and errors.As see
// through a panic(err).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// SessionError reports a task refused because its session is closing or
// ended, naming the key. It wraps Err ([ErrSessionClosing]).
type SessionError struct {
	Key any   // the session's key
	Err error // why: ErrSessionClosing
}

// Error returns, for example, `seqsched: session "user-42": closing`.
func (e *SessionError) Error() string {
	key := fmt.Sprint(e.Key)
	if s, ok := e.Key.(string); ok {
		key = fmt.Sprintf("%q", s)
	}
	why := strings.TrimPrefix(e.Err.Error(), "seqsched: session ")
	return "seqsched: session " + key + ": " + strings.TrimPrefix(why, "seqsched: ")
}

// Unwrap returns Err.
func (e *SessionError) Unwrap() error { return e.Err }

// HaltError reports that a task run with [HaltOnError] failed and halted
// its session, which now waits for [Scheduler.Resume] or Discard. It is
// what WithErrorHandler (or the log) gets, once per halt. It wraps both
// [ErrHalted] and the task's error, so errors.Is and errors.As see either.
type HaltError struct {
	Key any   // the halted session's key
	Err error // the task's error: fn's, a *PanicError, or ErrGoexit
}

// Error returns, for example, `seqsched: session "acct-7" halted: insufficient funds`.
func (e *HaltError) Error() string {
	key := fmt.Sprint(e.Key)
	if s, ok := e.Key.(string); ok {
		key = fmt.Sprintf("%q", s)
	}
	return "seqsched: session " + key + " halted: " + fmt.Sprint(e.Err)
}

// Unwrap returns ErrHalted and Err.
func (e *HaltError) Unwrap() []error { return []error{ErrHalted, e.Err} }
