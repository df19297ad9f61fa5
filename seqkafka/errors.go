package seqkafka

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/internal/opterr"
)

// Sentinel errors. Every error the package returns wraps one of these or
// one of seqsched's (or is a context error returned unchanged, or a
// *CommitError), so callers can test with errors.Is. A user function that
// panics fails with a *seqsched.PanicError (errors.As), one that calls
// runtime.Goexit with an error wrapping seqsched.ErrGoexit, and Close
// called from the consumer's own callback returns an error wrapping
// seqsched.ErrWouldDeadlock (see Close).
var (
	// ErrInvalidOption is wrapped by the *OptionError that NewConsumer
	// (or DeadLetterTopic) returns for an out-of-range option.
	ErrInvalidOption = errors.New("seqkafka: invalid option")

	// ErrNilHandler is returned by NewConsumer and NewBatchConsumer when
	// the handler is nil.
	ErrNilHandler = errors.New("seqkafka: nil handler")

	// ErrNoGroup is returned by NewConsumer when the client options name no
	// consumer group (kgo.ConsumerGroup) or no topics to consume.
	ErrNoGroup = errors.New("seqkafka: client options need kgo.ConsumerGroup and topics")

	// ErrClosed is returned by a Run that begins after Close has begun (a
	// Run already in progress returns nil once Close has stopped it).
	ErrClosed = errors.New("seqkafka: consumer closed")

	// ErrRunning is returned by Run while another Run is in progress.
	ErrRunning = errors.New("seqkafka: Run already in progress")

	// ErrNilContext is returned when a nil context.Context is passed.
	ErrNilContext = errors.New("seqkafka: nil context")

	// ErrTerminal marks a handler's error as not worth retrying: a record
	// whose attempt fails with an error that wraps it (see Terminal) goes
	// to the dead-letter step at once, whatever attempts are left.
	ErrTerminal = errors.New("seqkafka: terminal error")
)

// OptionError reports an option whose value is out of range. It wraps
// ErrInvalidOption.
//
// Option is the option as written, e.g. "WithMaxConcurrency(-1)"; Reason,
// what the value must be, e.g. "must be >= 1".
// Error returns "seqkafka: <Option>: <Reason>: invalid option".
type OptionError = opterr.Error[optionModule]

// optionModule makes OptionError this package's: its name opens the
// message, and it wraps ErrInvalidOption.
type optionModule struct{}

func (optionModule) Name() string    { return "seqkafka" }
func (optionModule) Sentinel() error { return ErrInvalidOption }

// goexitError is the error of a call whose user function called
// runtime.Goexit; errors.Is(err, seqsched.ErrGoexit) reports it.
type goexitError struct{ fn string }

func (e *goexitError) Error() string { return "seqkafka: " + e.fn + " called runtime.Goexit" }
func (e *goexitError) Unwrap() error { return seqsched.ErrGoexit }

// errWouldDeadlock is what Close returns when called from the consumer's
// own callback.
var errWouldDeadlock = fmt.Errorf("seqkafka: Close from the consumer's own callback: %w", seqsched.ErrWouldDeadlock)

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

// Error returns "seqkafka: <n> of <len> records failed, first: <err>".
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
	return fmt.Sprintf("seqkafka: %d of %d records failed, first: %v", n, len(e.Errs), first)
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
// returns one when its final commit failed (not for partitions a rebalance
// took meanwhile; see Consumer.Close): those partitions' records done since
// their last commit are then read again by their next owner.
type CommitError struct {
	Partitions map[string][]int32 // topic → partitions not committed, sorted
	Err        error              // why: the request's error, or the first partition's (a kerr error)
}

// Error returns "seqkafka: commit of <topic>[<partitions>] ...: <Err>".
func (e *CommitError) Error() string {
	var b strings.Builder
	b.WriteString("seqkafka: commit of")
	for _, t := range slices.Sorted(maps.Keys(e.Partitions)) {
		fmt.Fprintf(&b, " %s%v", t, e.Partitions[t])
	}
	return b.String() + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *CommitError) Unwrap() error { return e.Err }
