package seqjetstream

import (
	"errors"
	"fmt"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/internal/opterr"
)

// Sentinel errors. Every error the package returns wraps one of these or
// one of seqsched's (or is a context error returned unchanged), so callers
// can test with errors.Is. A user function that panics fails with a
// *seqsched.PanicError (errors.As), one that calls runtime.Goexit with an
// error wrapping seqsched.ErrGoexit, and Close called from the consumer's
// own callback returns an error wrapping seqsched.ErrWouldDeadlock (see
// Close).
var (
	// ErrInvalidOption is wrapped by every error that refuses a setting:
	// the *OptionError that NewConsumer (or Run, for WithBalance's
	// bucket) returns for an out-of-range option, and the *ConsumerError
	// it returns for a JetStream consumer setting it cannot honour.
	ErrInvalidOption = errors.New("seqjetstream: invalid option")

	// ErrConsumerConfig is wrapped by the *ConsumerError that NewConsumer
	// returns for a JetStream consumer it cannot consume safely: of the
	// settings refused (ErrInvalidOption), those of a consumer.
	ErrConsumerConfig = errors.New("seqjetstream: unusable consumer configuration")

	// ErrNilHandler is returned by NewConsumer when the handler is nil.
	ErrNilHandler = errors.New("seqjetstream: nil handler")

	// ErrNoConsumers is returned by NewConsumer when given no consumer.
	ErrNoConsumers = errors.New("seqjetstream: no JetStream consumer given")

	// ErrClosed is returned by Run once Close has begun.
	ErrClosed = errors.New("seqjetstream: consumer closed")

	// ErrRunning is returned by Run while another Run is in progress.
	ErrRunning = errors.New("seqjetstream: Run already in progress")

	// ErrNilContext is returned when a nil context.Context is passed.
	ErrNilContext = errors.New("seqjetstream: nil context")

	// ErrTerminal is matched (errors.Is) by the errors Terminal returns.
	ErrTerminal = errors.New("seqjetstream: terminal error")
)

// OptionError reports an option whose value is out of range. It wraps
// ErrInvalidOption.
//
// Option is the option as written, e.g. "WithMaxConcurrency(-1)"; Reason,
// what the value must be, e.g. "must be >= 1".
// Error returns "seqjetstream: <Option>: <Reason>: invalid option".
type OptionError = opterr.Error[optionModule]

// optionModule makes OptionError this package's: its name opens the
// message, and it wraps ErrInvalidOption.
type optionModule struct{}

func (optionModule) Name() string    { return "seqjetstream" }
func (optionModule) Sentinel() error { return ErrInvalidOption }

// ConsumerError reports a JetStream consumer whose configuration the
// Consumer cannot work with, e.g. a MaxAckPending above WithMaxBuffered.
// It wraps ErrConsumerConfig and ErrInvalidOption.
type ConsumerError struct {
	Stream   string // the consumer's stream
	Consumer string // the consumer's name
	Reason   string // what is wrong and what to change
}

// Error returns "seqjetstream: consumer <Stream>/<Consumer>: <Reason>".
func (e *ConsumerError) Error() string {
	return "seqjetstream: consumer " + e.Stream + "/" + e.Consumer + ": " + e.Reason
}

// Unwrap returns ErrConsumerConfig and ErrInvalidOption.
func (e *ConsumerError) Unwrap() []error { return []error{ErrConsumerConfig, ErrInvalidOption} }

// Terminal returns err marked as not worth retrying: a handler that
// returns it sends its message to the dead-letter step at once, whatever
// attempts are left. The result prints as err, unwraps to err, and wraps
// ErrTerminal; Terminal(nil) is nil.
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

// goexitError is the error of a call whose user function called
// runtime.Goexit; errors.Is(err, seqsched.ErrGoexit) reports it.
type goexitError struct{ fn string }

func (e *goexitError) Error() string { return "seqjetstream: " + e.fn + " called runtime.Goexit" }
func (e *goexitError) Unwrap() error { return seqsched.ErrGoexit }

// The errors of a handler, backoff or dead-letter function that called
// runtime.Goexit.
var (
	errHandlerGoexit    error = &goexitError{"handler"}
	errBackoffGoexit    error = &goexitError{"backoff function"}
	errDeadLetterGoexit error = &goexitError{"dead-letter function"}
)

// errWouldDeadlock is what Close returns when called from the consumer's
// own callback.
var errWouldDeadlock = fmt.Errorf("seqjetstream: Close from the consumer's own callback: %w", seqsched.ErrWouldDeadlock)
