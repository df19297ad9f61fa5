package kafka

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Sentinel errors. Every error the package returns wraps one of these (or
// is a context error returned unchanged, or a *CommitError), so callers
// can test with errors.Is.
var (
	// ErrInvalidOption is wrapped by the *OptionError that NewConsumer
	// returns for an out-of-range option.
	ErrInvalidOption = errors.New("seqsched/kafka: invalid option")

	// ErrNilHandler is returned by NewConsumer and NewBatchConsumer when
	// the handler is nil.
	ErrNilHandler = errors.New("seqsched/kafka: nil handler")

	// ErrNoGroup is returned by NewConsumer when the client options name no
	// consumer group (kgo.ConsumerGroup) or no topics to consume.
	ErrNoGroup = errors.New("seqsched/kafka: client options need kgo.ConsumerGroup and topics")

	// ErrClosed is returned by Run after Close has begun.
	ErrClosed = errors.New("seqsched/kafka: consumer closed")

	// ErrNilContext is returned when a nil context.Context is passed.
	ErrNilContext = errors.New("seqsched/kafka: nil context")

	// ErrNilClient is returned by DeadLetterTopic when the client is nil.
	ErrNilClient = errors.New("seqsched/kafka: nil client")

	// ErrGoexit is wrapped by the error of a call whose user function (the
	// handler, the batch handler, the backoff or the dead-letter function)
	// called runtime.Goexit: a failed call, like a panic.
	ErrGoexit = errors.New("seqsched/kafka: runtime.Goexit called")

	// ErrTerminal marks a handler's error as not worth retrying: a record
	// whose attempt fails with an error that wraps it (see Terminal) goes
	// to the dead-letter step at once, whatever attempts are left.
	ErrTerminal = errors.New("seqsched/kafka: terminal error")

	// ErrWouldDeadlock is returned by Close when it is called from one of
	// the consumer's own callbacks with the ctx that callback was given (or
	// one derived from it): Close cannot wait for the callback that calls
	// it, so it starts closing and returns at once (see Close).
	ErrWouldDeadlock = errors.New("seqsched/kafka: would deadlock: Close called from the consumer's own callback")
)

// OptionError reports an option whose value is out of range. It wraps
// ErrInvalidOption.
type OptionError struct {
	Option string // the option as written, e.g. "WithMaxConcurrency(-1)"
	Reason string // what the value must be, e.g. "must be >= 1"
}

// Error returns "seqsched/kafka: <Option>: <Reason>: invalid option".
func (e *OptionError) Error() string {
	return "seqsched/kafka: " + e.Option + ": " + e.Reason + ": invalid option"
}

// Unwrap returns ErrInvalidOption.
func (e *OptionError) Unwrap() error { return ErrInvalidOption }

// PanicError is the error of a call whose user function panicked. A
// handler's (or batch handler's) panic fails its attempt, which is retried
// and, after the last one, dead-lettered with this error; a backoff's panic
// fails the attempt it was computing the wait for (see WithBackoff).
type PanicError struct {
	Func  string // what panicked: "handler", "batch handler", "backoff" or "dead-letter function"
	Value any    // the value passed to panic
	Stack []byte // the panicking goroutine's stack
}

// Error returns "seqsched/kafka: <Func> panicked: <Value>".
func (e *PanicError) Error() string {
	return fmt.Sprintf("seqsched/kafka: %s panicked: %v", e.Func, e.Value)
}

// Unwrap returns Value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// goexitError is the error of a call whose user function called
// runtime.Goexit; errors.Is(err, ErrGoexit) reports it.
type goexitError struct{ fn string }

func (e *goexitError) Error() string        { return "seqsched/kafka: " + e.fn + " called runtime.Goexit" }
func (e *goexitError) Is(target error) bool { return target == ErrGoexit }

// Terminal returns err marked as not worth retrying: a handler that returns
// it sends its record to the dead-letter step at once. The result prints as
// err, unwraps to err, and wraps ErrTerminal; Terminal(nil) is nil. A
// BatchHandler marks one record so with BatchError.Errs[i] = Terminal(err),
// or the whole batch by returning Terminal(err).
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err}
}

type terminalError struct{ err error }

func (e *terminalError) Error() string        { return e.err.Error() }
func (e *terminalError) Unwrap() error        { return e.err }
func (e *terminalError) Is(target error) bool { return target == ErrTerminal }

// BatchError is what a BatchHandler returns to report its records one by
// one: Errs[i] is the outcome of the batch's record i, nil for done. Any
// other error, or a BatchError whose Errs is not as long as the batch,
// fails every record of the batch.
type BatchError struct {
	Errs []error
}

// Error returns "seqsched/kafka: <n> of <len> records failed, first: <err>".
func (e *BatchError) Error() string {
	n, first := 0, error(nil)
	for _, err := range e.Errs {
		if err != nil {
			if n == 0 {
				first = err
			}
			n++
		}
	}
	return fmt.Sprintf("seqsched/kafka: %d of %d records failed, first: %v", n, len(e.Errs), first)
}

// Unwrap returns the records' errors that are not nil.
func (e *BatchError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// CommitError reports partitions whose offsets a commit did not write. Close
// returns one when its final commit failed: those partitions' records done
// since their last commit are then read again by their next owner.
type CommitError struct {
	Partitions map[string][]int32 // topic → partitions not committed, sorted
	Err        error              // why: the request's error, or the first partition's (a kerr error)
}

// Error returns "seqsched/kafka: commit of <topic>[<partitions>] ...: <Err>".
func (e *CommitError) Error() string {
	var b strings.Builder
	b.WriteString("seqsched/kafka: commit of")
	for _, t := range slices.Sorted(maps.Keys(e.Partitions)) {
		fmt.Fprintf(&b, " %s%v", t, e.Partitions[t])
	}
	return b.String() + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *CommitError) Unwrap() error { return e.Err }
