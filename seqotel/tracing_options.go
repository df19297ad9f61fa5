package seqotel

import (
	"errors"
	"fmt"
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// A TracingOption configures a tracer at [NewTracing], or at the broker
// modules' NewTracing (otelkafka, oteljetstream) through [BrokerTracer].
// It prints as the call that made it.
type TracingOption interface {
	applyTracing(*tracingOptions)
	String() string
}

// WithTracerProvider sets where spans are made; tp must not be nil. The
// default is otel.GetTracerProvider(), as it is when the tracer is made.
func WithTracerProvider(tp trace.TracerProvider) TracingOption {
	return tracingOption{"WithTracerProvider(tp)", tp == nil, func(o *tracingOptions) { o.provider = tp }}
}

// WithPropagator sets how the broker modules' tracers read the producer's
// trace context from a message's headers; p must not be nil. The default
// is otel.GetTextMapPropagator(), as it is when the tracer is made (which
// reads nothing until the program sets one: set
// propagation.TraceContext{}, W3C traceparent, for instance). NewTracing
// refuses it: a task's ctx carries its submitter's span already.
func WithPropagator(p propagation.TextMapPropagator) TracingOption {
	return tracingOption{"WithPropagator(p)", p == nil, func(o *tracingOptions) {
		o.propagator = p
		o.brokerOnly = append(o.brokerOnly, "WithPropagator(p)")
	}}
}

// WithKeyAttribute sets the key's attribute on a task's span to f(key),
// in place of the default [KeyAttribute] with fmt.Sprint(key): to name it
// otherwise, or to put a hash or an account class there instead of a key
// that is personal data. f runs on the task's goroutine before the span
// starts; a panic there is the task's. f must not be nil, and K must be
// the Tracing's key type. Only for NewTracing: the broker tracers put no
// key on spans.
func WithKeyAttribute[K comparable](f func(key K) attribute.KeyValue) TracingOption {
	name := fmt.Sprintf("WithKeyAttribute(%T)", f)
	return tracingOption{name, f == nil, func(o *tracingOptions) {
		o.key = f
		o.keyOpts = append(o.keyOpts, name)
	}}
}

// WithoutKeyAttribute leaves the key off a task's span: for keys that must
// not leave the process. Only for NewTracing.
func WithoutKeyAttribute() TracingOption {
	return tracingOption{"WithoutKeyAttribute()", false, func(o *tracingOptions) {
		o.noKey = true
		o.keyOpts = append(o.keyOpts, "WithoutKeyAttribute()")
	}}
}

type tracingOption struct {
	name  string
	isNil bool // the value given is nil: refused
	fn    func(*tracingOptions)
}

func (t tracingOption) applyTracing(o *tracingOptions) {
	if t.isNil {
		o.errs = append(o.errs, &OptionError{Option: t.name, Reason: "must not be nil"})
		return
	}
	t.fn(o)
}

func (t tracingOption) String() string { return t.name }

type tracingOptions struct {
	provider   trace.TracerProvider
	propagator propagation.TextMapPropagator
	key        any      // WithKeyAttribute's func(K) attribute.KeyValue
	noKey      bool     // WithoutKeyAttribute
	keyOpts    []string // the key options given, as written
	brokerOnly []string // the options only the broker tracers take, as written
	errs       []error
}

// newTracingOptions applies opts and checks the result for the tracer of a
// scheduler of key type kt (reflect.TypeFor[K]()), or a broker tracer's
// when kt is nil, which takes no key option: every check is here, and the
// error names every bad option.
func newTracingOptions(opts []TracingOption, kt reflect.Type) (tracingOptions, error) {
	var o tracingOptions
	for _, opt := range opts {
		if opt == nil {
			o.errs = append(o.errs, &OptionError{Option: "nil", Reason: "must be a TracingOption"})
			continue
		}
		opt.applyTracing(&o)
	}
	switch {
	case kt == nil:
		for _, name := range o.keyOpts {
			o.errs = append(o.errs, &OptionError{Option: name, Reason: "only for seqotel.NewTracing: a broker tracer puts no key on spans"})
		}
	case len(o.keyOpts) > 1:
		o.errs = append(o.errs, &OptionError{Option: o.keyOpts[1], Reason: "the key's attribute is set twice: give one key option"})
	case o.key != nil && reflect.TypeOf(o.key).In(0) != kt:
		o.errs = append(o.errs, &OptionError{Option: o.keyOpts[0], Reason: fmt.Sprintf("the key type must be the Tracing's, %v", kt)})
	}
	if kt != nil {
		for _, name := range o.brokerOnly {
			o.errs = append(o.errs, &OptionError{Option: name, Reason: "only for the broker tracers: a task's ctx carries its submitter's span"})
		}
	}
	if o.provider == nil {
		o.provider = otel.GetTracerProvider()
	}
	if o.propagator == nil {
		o.propagator = otel.GetTextMapPropagator()
	}
	return o, errors.Join(o.errs...)
}

// BrokerTracer checks opts as the broker modules' NewTracing do (otelkafka,
// oteljetstream), with the same errors, and returns the tracer named
// scope of the TracerProvider they give and the propagator that reads a
// producer's trace context from a message. It refuses the key options.
// It is there for a tracer of your own, too.
func BrokerTracer(scope string, opts ...TracingOption) (trace.Tracer, propagation.TextMapPropagator, error) {
	o, err := newTracingOptions(opts, nil)
	if err != nil {
		return nil, nil, err
	}
	return o.provider.Tracer(scope), o.propagator, nil
}
