package seqprom

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/seqsched/seqsched/internal/opterr"
)

// An Option configures a Collector at NewCollector. It prints as the call
// that made it (`WithNamespace("chat")`).
type Option interface {
	apply(*options)
	String() string
}

// WithNamespace puts ns and an underscore before every metric's name:
// WithNamespace("chat") reports chat_seqsched_tasks_total. ns must be a
// Prometheus name without colons: [a-zA-Z_][a-zA-Z0-9_]*, or "" for none
// (the default). The last WithNamespace given counts.
func WithNamespace(ns string) Option { return namespaceOption(ns) }

// WithConstLabels adds labels, with fixed values, to every metric: a way
// to tell several schedulers of one process apart (scheduler="chat").
// Names must be Prometheus label names ([a-zA-Z_][a-zA-Z0-9_]*, not
// starting with "__"), other than those seqsched's collectors use
// (priority, outcome, stream, consumer, topic, partition) and le; values must be valid UTF-8. A name given twice, in one
// call or two, is an error. The map is copied.
func WithConstLabels(labels prometheus.Labels) Option {
	return constLabelsOption{maps.Clone(labels)}
}

// ErrInvalidOption is wrapped by the *OptionError that NewCollector
// returns for an invalid option.
var ErrInvalidOption = errors.New("seqprom: invalid option")

// OptionError reports an option with an invalid value. It wraps
// ErrInvalidOption.
//
// Option is the option as written, e.g. `WithNamespace("1st")`; Reason,
// what the value must be.
// Error returns "seqprom: <Option>: <Reason>: invalid option".
type OptionError = opterr.Error[optionModule]

// optionModule makes OptionError this package's: its name opens the
// message, and it wraps ErrInvalidOption.
type optionModule struct{}

func (optionModule) Name() string    { return "seqprom" }
func (optionModule) Sentinel() error { return ErrInvalidOption }

type options struct {
	namespace string              // from the last WithNamespace
	labelSets []constLabelsOption // from each WithConstLabels, in order
	nils      int                 // nil Options

	// Set by newOptions from the above once checked.
	prefix string            // the namespace and "_", or ""
	labels prometheus.Labels // const labels, nil if none
}

var nameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// reserved are the label names that the collectors of seqsched's Stats use
// (the scheduler's, the broker modules'), and le.
var reserved = []string{"priority", "outcome", "stream", "consumer", "topic", "partition", "le"}

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
	if o.namespace != "" {
		if nameRE.MatchString(o.namespace) {
			o.prefix = o.namespace + "_"
		} else {
			errs = append(errs, &OptionError{Option: namespaceOption(o.namespace).String(), Reason: "must match [a-zA-Z_][a-zA-Z0-9_]*"})
		}
	}
	for _, set := range o.labelSets {
		for _, name := range slices.Sorted(maps.Keys(set.labels)) {
			value := set.labels[name]
			_, dup := o.labels[name]
			var reason string
			switch {
			case !nameRE.MatchString(name) || strings.HasPrefix(name, "__"):
				reason = fmt.Sprintf("label name %q must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __", name)
			case slices.Contains(reserved, name):
				reason = fmt.Sprintf("label name %q is one the metrics use", name)
			case !utf8.ValidString(value):
				reason = fmt.Sprintf("label %q: value must be valid UTF-8", name)
			case dup:
				reason = fmt.Sprintf("label %q given twice", name)
			}
			if reason != "" {
				errs = append(errs, &OptionError{Option: set.String(), Reason: reason})
				continue
			}
			if o.labels == nil {
				o.labels = prometheus.Labels{}
			}
			o.labels[name] = value
		}
	}
	return o, errors.Join(errs...)
}

type (
	namespaceOption   string
	constLabelsOption struct{ labels prometheus.Labels }
)

func (ns namespaceOption) apply(o *options)  { o.namespace = string(ns) }
func (l constLabelsOption) apply(o *options) { o.labelSets = append(o.labelSets, l) }

func (ns namespaceOption) String() string { return fmt.Sprintf("WithNamespace(%q)", string(ns)) }

func (l constLabelsOption) String() string {
	var b strings.Builder
	b.WriteString("WithConstLabels({")
	for i, name := range slices.Sorted(maps.Keys(l.labels)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q: %q", name, l.labels[name])
	}
	b.WriteString("})")
	return b.String()
}
