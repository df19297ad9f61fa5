package seqsched

import (
	"fmt"
	"log/slog"
)

// Defaults and bounds of the scheduler's options.
const (
	DefaultYieldAfter = 10 // tasks a session runs before it offers its turn
	MinYieldAfter     = 10 // smallest value WithYieldAfter accepts
	MaxYieldAfter     = 50 // largest value WithYieldAfter accepts
)

// An Option configures a [Scheduler] at [New]. Options are values: they can
// be compared, and they print as the call that made them
// ("WithYieldAfter(20)").
type Option interface {
	apply(*options)
}

// options is the validated configuration of a Scheduler. It is written only
// by New, so every read after New is free of synchronisation.
type options struct {
	yieldAfter     int
	maxConcurrency int
	maxQueue       int
	logger         *slog.Logger
}

// newOptions applies opts over the defaults and validates the result. It is
// the one place where option values are checked.
func newOptions(opts []Option) (options, error) {
	o := options{
		yieldAfter: DefaultYieldAfter,
		logger:     slog.New(slog.DiscardHandler),
	}
	for i, opt := range opts {
		if opt == nil {
			return o, &OptionError{Option: fmt.Sprintf("option %d", i), Reason: "must not be nil"}
		}
		opt.apply(&o)
	}
	switch {
	case o.yieldAfter < MinYieldAfter || o.yieldAfter > MaxYieldAfter:
		return o, &OptionError{Option: yieldAfterOption(o.yieldAfter).String(),
			Reason: fmt.Sprintf("must be %d..%d", MinYieldAfter, MaxYieldAfter)}
	case o.maxConcurrency < 0:
		return o, &OptionError{Option: maxConcurrencyOption(o.maxConcurrency).String(),
			Reason: "must be >= 0 (0 means no limit)"}
	case o.maxQueue < 0:
		return o, &OptionError{Option: maxQueueOption(o.maxQueue).String(),
			Reason: "must be >= 0 (0 means no limit)"}
	case o.logger == nil:
		return o, &OptionError{Option: "WithLogger(nil)",
			Reason: "must not be nil (leave the option out to discard logs)"}
	}
	return o, nil
}

// WithYieldAfter sets how many tasks a session runs in one turn before it
// checks whether another session is waiting, and if so gives way to it.
// n must be 10..50; the default is 10. Lower values spread latency more
// evenly across sessions; higher values cost fewer hand-offs under load.
func WithYieldAfter(n int) Option { return yieldAfterOption(n) }

// WithMaxConcurrency bounds how many sessions run at once. Sessions with work
// but no slot wait in one FIFO ready queue and take slots in turn.
// n must be >= 0; 0 (the default) means no limit.
//
// A task that awaits another session's future holds its slot while it
// waits: with n = 1 that other session can never run. Keep such waits out of
// tasks, or leave room in n.
func WithMaxConcurrency(n int) Option { return maxConcurrencyOption(n) }

// WithMaxQueue bounds how many tasks may wait in each session's High and
// each session's Normal queue (the running task is not counted). A Submit
// beyond it fails at once with [ErrQueueFull]; nothing blocks.
// n must be >= 0; 0 (the default) means no limit.
func WithMaxQueue(n int) Option { return maxQueueOption(n) }

// WithLogger sets where recovered panics (Error) and yields (Debug) are
// logged. l must not be nil; without this option logs are discarded.
func WithLogger(l *slog.Logger) Option { return loggerOption{l} }

type (
	yieldAfterOption     int
	maxConcurrencyOption int
	maxQueueOption       int
	loggerOption         struct{ l *slog.Logger }
)

func (o yieldAfterOption) apply(opts *options)     { opts.yieldAfter = int(o) }
func (o maxConcurrencyOption) apply(opts *options) { opts.maxConcurrency = int(o) }
func (o maxQueueOption) apply(opts *options)       { opts.maxQueue = int(o) }
func (o loggerOption) apply(opts *options)         { opts.logger = o.l }

func (o yieldAfterOption) String() string     { return fmt.Sprintf("WithYieldAfter(%d)", int(o)) }
func (o maxConcurrencyOption) String() string { return fmt.Sprintf("WithMaxConcurrency(%d)", int(o)) }
func (o maxQueueOption) String() string       { return fmt.Sprintf("WithMaxQueue(%d)", int(o)) }
func (o loggerOption) String() string         { return "WithLogger(...)" }
