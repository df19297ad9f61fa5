package seqwatermill

import "errors"

var (
	// ErrClosed is returned by Subscribe after [Subscriber.Close] began.
	ErrClosed = errors.New("seqwatermill: subscriber closed")

	// ErrInvalidOption is wrapped by the error NewSubscriber (and the
	// decorator, and so the Router's Run) returns for a bad or missing
	// option; the message names the option and what it must be.
	ErrInvalidOption = errors.New("seqwatermill: invalid option")

	// ErrHalted is the error of the record logged at Error, once per halt,
	// when [WithHaltOnNack] halts a key; the record's fields hold the key
	// ("key") and the message ("message_uuid"). A logger adapter can match
	// it with errors.Is to alert whoever resumes keys
	// ([Subscriber.Resume], [Controller.Resume]).
	ErrHalted = errors.New("seqwatermill: key halted: message nacked on its last attempt")
)

// optionError is what the options found wrong; it wraps ErrInvalidOption.
type optionError struct{ what string }

// Error returns "seqwatermill: <what>: invalid option".
func (e *optionError) Error() string { return "seqwatermill: " + e.what + ": invalid option" }

// Unwrap returns ErrInvalidOption.
func (e *optionError) Unwrap() error { return ErrInvalidOption }
