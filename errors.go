package seqsched

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the package itself returns wraps one of these
// (or is a context error returned unchanged), so callers can test with
// [errors.Is]. A future also resolves with what its task's fn returned,
// unchanged, or, when fn panicked, with a [*PanicError], which callers test
// with [errors.As].
var (
	// ErrClosed is returned by Submit after [Scheduler.Shutdown] has begun,
	// and resolves every future that a forced shutdown skipped.
	ErrClosed = errors.New("seqsched: scheduler closed")

	// ErrSessionClosing is returned by Submit for a key that is being
	// drained by [Scheduler.Remove].
	ErrSessionClosing = errors.New("seqsched: session closing")

	// ErrQueueFull is returned by Submit when the session's queue for the
	// task's priority already holds the WithMaxQueue limit.
	ErrQueueFull = errors.New("seqsched: queue full")

	// ErrWouldDeadlock is returned by [Future.Await] and [Scheduler.Remove]
	// when called from a running task of the very session they would wait
	// for, and by [Scheduler.Shutdown] when called from a running task of
	// its scheduler, with that task's ctx (or one derived from it): that
	// wait could never end. The task is known by its ctx; under another ctx the wait
	// lasts until that ctx ends.
	ErrWouldDeadlock = errors.New("seqsched: would deadlock")

	// ErrInvalidOption is wrapped by the [*OptionError] that New and Submit
	// return for an out-of-range option.
	ErrInvalidOption = errors.New("seqsched: invalid option")

	// ErrNilFunc is returned by Submit and Go when fn is nil.
	ErrNilFunc = errors.New("seqsched: nil func")

	// ErrNilContext is returned when a nil context.Context is passed where
	// one is required.
	ErrNilContext = errors.New("seqsched: nil context")

	// ErrInvalidKey is wrapped by the [*KeyError] that Submit, Go and Remove
	// return for a key that a map cannot hold: one that is not equal to
	// itself (a NaN, or a struct, array or interface holding one) or, in an
	// interface, a value whose type is not comparable (a slice, a map, a
	// func, or a struct holding one).
	ErrInvalidKey = errors.New("seqsched: invalid key")

	// ErrNotNew is returned by the methods of a nil or zero Scheduler, and
	// of a nil *Session: make one with [New] (and [Scheduler.Open]).
	ErrNotNew = errors.New("seqsched: not made by New")

	// ErrGoexit resolves the future of a task that called runtime.Goexit
	// (for example through t.FailNow in a test). The session continues.
	ErrGoexit = errors.New("seqsched: task called runtime.Goexit")
)

// OptionError reports an option whose value is out of range. It wraps
// [ErrInvalidOption].
type OptionError struct {
	Option string // the option as written, e.g. "WithYieldAfter(5)"
	Reason string // what the value must be, e.g. "must be 10..50"
}

// Error returns "seqsched: <Option>: <Reason>: invalid option".
func (e *OptionError) Error() string {
	return "seqsched: " + e.Option + ": " + e.Reason + ": invalid option"
}

// Unwrap returns [ErrInvalidOption].
func (e *OptionError) Unwrap() error { return ErrInvalidOption }

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
