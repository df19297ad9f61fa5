package jetstream

import (
	"errors"
	"fmt"

	"github.com/seqsched/seqsched"
)

// Sentinel errors. Every error the package returns wraps one of these (or
// is a context error returned unchanged), so callers can test with
// errors.Is.
var (
	// ErrInvalidOption is wrapped by every error that refuses a setting:
	// the *OptionError that NewConsumer (or Run, for WithBalance's
	// bucket) returns for an out-of-range option, and the *ConsumerError
	// it returns for a JetStream consumer setting it cannot honour.
	ErrInvalidOption = errors.New("seqsched/jetstream: invalid option")

	// ErrConsumerConfig is wrapped by the *ConsumerError that NewConsumer
	// returns for a JetStream consumer it cannot consume safely: of the
	// settings refused (ErrInvalidOption), those of a consumer.
	ErrConsumerConfig = errors.New("seqsched/jetstream: unusable consumer configuration")

	// ErrNilHandler is returned by NewConsumer when the handler is nil.
	ErrNilHandler = errors.New("seqsched/jetstream: nil handler")

	// ErrNoConsumers is returned by NewConsumer when given no consumer.
	ErrNoConsumers = errors.New("seqsched/jetstream: no JetStream consumer given")

	// ErrClosed is returned by Run once Close has begun.
	ErrClosed = errors.New("seqsched/jetstream: consumer closed")

	// ErrRunning is returned by Run while another Run is in progress.
	ErrRunning = errors.New("seqsched/jetstream: Run already in progress")

	// ErrNilContext is returned when a nil context.Context is passed.
	ErrNilContext = errors.New("seqsched/jetstream: nil context")

	// ErrHandlerGoexit is the error of an attempt whose handler (or
	// dead-letter function) called runtime.Goexit: a failed attempt, like
	// a panic.
	ErrHandlerGoexit = errors.New("seqsched/jetstream: handler called runtime.Goexit")

	// ErrTerminal is matched (errors.Is) by the errors Terminal returns.
	ErrTerminal = errors.New("seqsched/jetstream: terminal error")

	// ErrWouldDeadlock is returned by Close when called with the ctx of
	// one of the consumer's callbacks (a handler, a backoff or dead-letter
	// function, a log handler), or one derived from it: Close cannot wait for the
	// message that callback is handling. The close has begun; a Close from
	// outside waits for it. It wraps seqsched.ErrWouldDeadlock.
	ErrWouldDeadlock = fmt.Errorf("seqsched/jetstream: Close from the consumer's own callback: %w", seqsched.ErrWouldDeadlock)
)

// OptionError reports an option whose value is out of range. It wraps
// ErrInvalidOption.
type OptionError struct {
	Option string // the option as written, e.g. "WithMaxConcurrency(-1)"
	Reason string // what the value must be, e.g. "must be >= 1"
}

// Error returns "seqsched/jetstream: <Option>: <Reason>: invalid option".
func (e *OptionError) Error() string {
	return "seqsched/jetstream: " + e.Option + ": " + e.Reason + ": invalid option"
}

// Unwrap returns ErrInvalidOption.
func (e *OptionError) Unwrap() error { return ErrInvalidOption }

// ConsumerError reports a JetStream consumer whose configuration the
// Consumer cannot work with, e.g. a MaxAckPending above WithMaxBuffered.
// It wraps ErrConsumerConfig and ErrInvalidOption.
type ConsumerError struct {
	Stream   string // the consumer's stream
	Consumer string // the consumer's name
	Reason   string // what is wrong and what to change
}

// Error returns "seqsched/jetstream: consumer <Stream>/<Consumer>: <Reason>".
func (e *ConsumerError) Error() string {
	return "seqsched/jetstream: consumer " + e.Stream + "/" + e.Consumer + ": " + e.Reason
}

// Unwrap returns ErrConsumerConfig and ErrInvalidOption.
func (e *ConsumerError) Unwrap() []error { return []error{ErrConsumerConfig, ErrInvalidOption} }

// Terminal marks err as not worth retrying: a handler that returns it has
// its message dead-lettered and terminated at once. The result matches
// both ErrTerminal and err with errors.Is. Terminal(nil) returns nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err}
}

type terminalError struct{ err error }

func (e *terminalError) Error() string        { return "terminal: " + e.err.Error() }
func (e *terminalError) Unwrap() error        { return e.err }
func (e *terminalError) Is(target error) bool { return target == ErrTerminal }
