// Package opterr is the shape of the option error that seqsched and each
// of its modules return: the option as written, what its value must be, a
// message that names the module, and the module's ErrInvalidOption to
// wrap. Each module's OptionError is an alias of Error instantiated with a
// module type of its own, so that the shape is written once while
// errors.As still tells one module's errors from another's, and
// composite literals (&OptionError{Option: ..., Reason: ...}) keep working.
package opterr

// Module is what an option error needs of its module: its name, which
// opens the message, and the sentinel the error wraps.
type Module interface {
	Name() string    // e.g. "seqsched"
	Sentinel() error // the module's ErrInvalidOption
}

// Error reports an option whose value is out of range, a missing option,
// or options that do not fit together. It wraps M's sentinel.
type Error[M Module] struct {
	Option string // the option as written, e.g. "WithYieldAfter(5)"
	Reason string // what the value must be, e.g. "must be 10..50"
}

// Error returns "<module>: <Option>: <Reason>: invalid option".
func (e *Error[M]) Error() string {
	var m M
	return m.Name() + ": " + e.Option + ": " + e.Reason + ": invalid option"
}

// Unwrap returns M's sentinel.
func (e *Error[M]) Unwrap() error {
	var m M
	return m.Sentinel()
}
