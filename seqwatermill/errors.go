package seqwatermill

import (
	"errors"

	"github.com/seqsched/seqsched/internal/opterr"
)

var (
	// ErrClosed is returned by Subscribe after [Subscriber.Close] began.
	ErrClosed = errors.New("seqwatermill: subscriber closed")

	// ErrInvalidOption is wrapped by the *OptionError NewSubscriber (and
	// the decorator, and so the Router's Run) returns for a bad or missing
	// option; the message names the option and what it must be.
	ErrInvalidOption = errors.New("seqwatermill: invalid option")

	// ErrHalted is the error of the record logged at Error, once per halt,
	// when [WithHaltOnNack] halts a key; the record's fields hold the key
	// ("key") and the message ("message_uuid"), each as a quoted Go string
	// (strconv.Unquote gives the key back, cut to 64 bytes: see
	// [WithLogger]). A logger adapter can match
	// it with errors.Is to alert whoever resumes keys
	// ([Subscriber.Resume], [Controller.Resume]).
	ErrHalted = errors.New("seqwatermill: key halted: message nacked on its last attempt")
)

// ErrNoKey is the error of the record logged at Error, once per
// subscription, when a message lacks WithKeyMetadata's field: such
// messages share the empty key, so they are handled one at a time, which
// silently makes a service single-lane. The record's fields hold the
// message's UUID and the field's name.
var ErrNoKey = errors.New("seqwatermill: message without the key metadata")

// OptionError reports an option whose value is out of range, a missing
// option, or options that do not fit together. NewSubscriber (and so the
// Router's Run with the Decorator) returns one per bad option, joined
// (errors.Join) when there are several. It wraps ErrInvalidOption.
//
// Option is the option as written, e.g. "WithMaxBuffered(0)"; Reason, what
// the value must be, e.g. "must be >= 1".
// Error returns "seqwatermill: <Option>: <Reason>: invalid option".
type OptionError = opterr.Error[optionModule]

// optionModule makes OptionError this package's: its name opens the
// message, and it wraps ErrInvalidOption.
type optionModule struct{}

func (optionModule) Name() string    { return "seqwatermill" }
func (optionModule) Sentinel() error { return ErrInvalidOption }
