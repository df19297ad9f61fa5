package seqotel

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/seqsched/seqsched/internal/opterr"
	"go.opentelemetry.io/otel/attribute"
)

// An Option configures Metrics at New. It prints as the call that made it.
type Option interface {
	apply(*options)
	String() string
}

// WithAttributes adds attributes to every data point: a way to tell
// several schedulers of one process apart (scheduler="chat"). Keys must be
// non-empty and other than those the data points of seqsched's exporters
// use (priority, outcome, and the broker modules' stream, consumer, topic
// and partition); a key given twice, in one call or two, is an error.
func WithAttributes(kv ...attribute.KeyValue) Option { return attributesOption(slices.Clone(kv)) }

// ErrInvalidOption is wrapped by the *OptionError that New returns for an
// invalid option.
var ErrInvalidOption = errors.New("seqotel: invalid option")

// OptionError reports an option with an invalid value. It wraps
// ErrInvalidOption.
//
// Option is the option as written; Reason, what the value must be.
// Error returns "seqotel: <Option>: <Reason>: invalid option".
type OptionError = opterr.Error[optionModule]

// optionModule makes OptionError this package's: its name opens the
// message, and it wraps ErrInvalidOption.
type optionModule struct{}

func (optionModule) Name() string    { return "seqotel" }
func (optionModule) Sentinel() error { return ErrInvalidOption }

// Attributes checks opts as New does, with the same errors, and returns
// the attributes that WithAttributes gave, in order: those every data
// point carries. The exporters of the broker consumers (otelkafka,
// oteljetstream) take this package's Options through it, and so may an
// exporter of your own.
func Attributes(opts ...Option) ([]attribute.KeyValue, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	return o.attrs, nil
}

// reserved are the attribute keys that the data points of seqsched's
// exporters use (the scheduler's, the broker modules').
var reserved = []attribute.Key{"priority", "outcome", "stream", "consumer", "topic", "partition"}

type options struct {
	sets []attributesOption // from each WithAttributes, in order
	nils int

	attrs []attribute.KeyValue // checked, set by newOptions
}

// newOptions applies opts and checks the result: every check is here, and
// the error names every bad option.
func newOptions(opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if opt == nil {
			o.nils++
			continue
		}
		opt.apply(&o)
	}
	var errs []error
	if o.nils > 0 {
		errs = append(errs, &OptionError{Option: "nil", Reason: "must be an Option"})
	}
	seen := map[attribute.Key]bool{}
	for _, set := range o.sets {
		for _, kv := range set {
			var reason string
			switch {
			case kv.Key == "":
				reason = "an attribute key must not be empty"
			case slices.Contains(reserved, kv.Key):
				reason = fmt.Sprintf("attribute %q is one the data points use", kv.Key)
			case seen[kv.Key]:
				reason = fmt.Sprintf("attribute %q given twice", kv.Key)
			case !kv.Valid():
				reason = fmt.Sprintf("attribute %q has no value", kv.Key)
			}
			if reason != "" {
				errs = append(errs, &OptionError{Option: set.String(), Reason: reason})
				continue
			}
			seen[kv.Key] = true
			o.attrs = append(o.attrs, kv)
		}
	}
	return o, errors.Join(errs...)
}

type attributesOption []attribute.KeyValue

func (a attributesOption) apply(o *options) { o.sets = append(o.sets, a) }

func (a attributesOption) String() string {
	parts := make([]string, len(a))
	for i, kv := range a {
		parts[i] = fmt.Sprintf("%s=%s", kv.Key, kv.Value.Emit())
	}
	return "WithAttributes(" + strings.Join(parts, ", ") + ")"
}
