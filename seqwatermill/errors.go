package seqwatermill

import "errors"

var (
	// ErrClosed is returned by Subscribe after [Subscriber.Close] began.
	ErrClosed = errors.New("seqwatermill: subscriber closed")

	// ErrInvalidOption is wrapped by the error NewSubscriber (and the
	// decorator, and so the Router's Run) returns for a bad or missing
	// option; the message names the option and what it must be.
	ErrInvalidOption = errors.New("seqwatermill: invalid option")
)
