package seqsched

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"time"
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
	yieldInterval  time.Duration
	weight         any // func(K) int, checked against K by newOptions
	errHandler     any // func(context.Context, K, error), checked against K by newOptions
	highBurst      int
	slowTask       time.Duration
	waitHistogram  bool
	runHistogram   bool
	haltOnError    bool
	rate           any   // func(K) (float64, int), checked against K by newOptions
	interceptors   []any // func(context.Context, K, func(context.Context) error) error, checked against K by newOptions
	shards         int   // a power of two; 0: New's own rule. Set only by tests (export_test.go)
	idleRecords    int   // idle records kept over all shards; 0: idleRecords. Set only by tests (export_test.go)
}

// Bounds of WithWeight's weights.
const (
	MinWeight = 1
	MaxWeight = 100
)

// newOptions applies opts over the defaults and validates the result. It is
// the one place where option values are checked.
func newOptions[K comparable](opts []Option) (options, error) {
	o := options{
		yieldAfter: DefaultYieldAfter,
		logger:     slog.Default(),
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
			Reason: "must not be nil (pass slog.New(slog.DiscardHandler) to discard logs)"}
	case o.yieldInterval < 0:
		return o, &OptionError{Option: yieldIntervalOption(o.yieldInterval).String(),
			Reason: "must be >= 0 (0 means off)"}
	case o.highBurst < 0:
		return o, &OptionError{Option: highBurstOption(o.highBurst).String(),
			Reason: "must be >= 0 (0 means strict High-first)"}
	case o.shards < 0 || o.shards&(o.shards-1) != 0:
		return o, &OptionError{Option: fmt.Sprintf("shards(%d)", o.shards),
			Reason: "must be a power of two"}
	case o.slowTask < 0:
		return o, &OptionError{Option: slowTaskOption(o.slowTask).String(),
			Reason: "must be >= 0 (0 means off)"}
	}
	if err := checkFunc[K, func(K) int]("WithWeight", o.weight); err != nil {
		return o, err
	}
	if err := checkFunc[K, func(context.Context, K, error)]("WithErrorHandler", o.errHandler); err != nil {
		return o, err
	}
	if err := checkFunc[K, func(K) (float64, int)]("WithRate", o.rate); err != nil {
		return o, err
	}
	for _, f := range o.interceptors {
		if err := checkFunc[K, func(context.Context, K, func(context.Context) error) error]("WithInterceptor", f); err != nil {
			return o, err
		}
	}
	return o, nil
}

// checkFunc checks the function f that option name was given (nil: the
// option was not used): it must be an F, which takes the scheduler's key
// type K, and not a nil one.
func checkFunc[K comparable, F any](name string, f any) error {
	if f == nil {
		return nil
	}
	if _, ok := f.(F); !ok {
		var key K
		return &OptionError{Option: fmt.Sprintf("%s(%T)", name, f),
			Reason: fmt.Sprintf("must take the scheduler's key type %T", key)}
	}
	if reflect.ValueOf(f).IsNil() {
		return &OptionError{Option: name + "(nil)", Reason: "must not be nil"}
	}
	return nil
}

// WithHaltOnError runs every task as if submitted with [HaltOnError]: a
// session whose task fails pauses until [Scheduler.Resume] or Discard.
func WithHaltOnError() Option { return haltOnErrorOption{} }

type haltOnErrorOption struct{}

func (haltOnErrorOption) apply(opts *options) { opts.haltOnError = true }
func (haltOnErrorOption) String() string      { return "WithHaltOnError()" }

// WithYieldAfter sets how many tasks a session runs in one turn before it
// checks whether another session is waiting, and if so gives way to it.
// n must be 10..50; the default is 10. Lower values spread latency more
// evenly across sessions; higher values cost fewer hand-offs under load.
func WithYieldAfter(n int) Option { return yieldAfterOption(n) }

// WithMaxConcurrency bounds how many sessions run a task at once. Sessions
// with work but no slot wait in one FIFO ready queue and take slots in turn.
// n must be >= 0; 0 (the default) means no limit.
//
// A task that awaits another session's future with its own ctx (see
// [Future.Await]) lends its slot while it waits and takes one back, ahead of
// waiting sessions, before Await returns: chains of sessions awaiting each
// other complete even with n = 1. A task may await on several goroutines
// at once: its slot stays lent while any of those Awaits waits and is taken
// back once, by the last to return. A wait on [Future.Done], or an Await with
// an unrelated ctx, keeps the slot. After a Shutdown that gave up (see
// [Scheduler.Shutdown]) a task coming back from such an Await does not
// wait for a slot: it runs on beyond n, its ctx canceled.
func WithMaxConcurrency(n int) Option { return maxConcurrencyOption(n) }

// WithMaxQueue bounds how many tasks may wait in each session's High and
// each session's Normal queue (the running task is not counted). A Submit,
// Go or Post beyond it fails at once with [ErrQueueFull], unless it is
// submitted with [WaitForRoom], which waits for room instead.
// n must be >= 0; 0 (the default) means no limit.
func WithMaxQueue(n int) Option { return maxQueueOption(n) }

// WithLogger sets where the scheduler logs, each record with the session's
// key (but for Shutdown's); the default is slog.Default(), so that
// failures nobody handles still reach the process's log. Records:
//
//   - Error: a task that panicked or called runtime.Goexit; a
//     WithErrorHandler function that did; a submit ctx whose Err did; a
//     WithWeight or WithRate function that did, or returned a value out of
//     range (each once per scheduler); without [WithErrorHandler], a halt
//     ([HaltOnError]).
//   - Warn: a slow task (with [WithSlowTask]); Shutdown or Remove waiting
//     on paused keys with work (see [Scheduler.Shutdown]).
//   - Without [WithErrorHandler], a posted task's failure, at a level
//     chosen by where it came from: Error for fn's own error (whatever it
//     wraps), Warn for a task dropped when the scheduler gave up (Close,
//     or Shutdown's ctx ended), and Debug for one that never ran because
//     the ctx its submitter passed ended, Discard dropped it or Replace
//     replaced it, which is what a server sees when a client goes away.
//
// l must not be nil; to discard logs, pass slog.New(slog.DiscardHandler).
//
// The handler runs on the scheduler's goroutines, with no lock held, and
// is given a ctx that identifies the session's worker: see
// [WithErrorHandler] for what a callback may do.
func WithLogger(l *slog.Logger) Option { return loggerOption{l} }

// WithYieldInterval adds a time quantum to turns: a session's turn also ends
// once it has lasted d, whichever of WithYieldAfter's count and d comes
// first; what happens at the end of a turn is unchanged. The clock is read
// between tasks only — a running task is never preempted — and only when
// this option is set (one time.Now per task). d must be >= 0; 0 (the
// default) means off.
func WithYieldInterval(d time.Duration) Option { return yieldIntervalOption(d) }

// WithWeight gives sessions different service levels: when a session
// starts a turn, the turn lasts yieldAfter × weight(key) tasks. Weights
// must be MinWeight..MaxWeight; a weight out of range, and a weight
// function that panics or calls runtime.Goexit, are each logged at Error,
// once per scheduler, and count as 1. weight is called once per turn, on the
// scheduler's goroutine, and nothing is stored for idle sessions. It is
// given no ctx, so it must not wait on the scheduler (Await, Remove,
// Discard, Close, Shutdown): it should be a quick lookup. Its key type must
// be the scheduler's: New returns an [*OptionError] otherwise.
func WithWeight[K comparable](weight func(key K) int) Option { return &weightOption{weight} }

// WithErrorHandler sets where the failures of tasks queued with Post go:
// fn's error, a [*PanicError], [ErrGoexit], or, for a task that never ran,
// its submit ctx's error, [ErrDiscarded] or [ErrClosed]. f is called once
// per failed task, with its key, on the goroutine of the task's session,
// with no lock held, before the session's next task starts; for tasks that
// Discard dropped, or that were dropped when the scheduler gave up, as soon
// as the session's running task (if any) returns (under
// [WithMaxConcurrency], a session waiting for a slot reports when its turn
// comes), and always before the key's next session starts and before
// Discard, Remove and Shutdown return nil. So a Remove or Shutdown that
// returns nil finds every failure reported. Without it failures go to the log (see [WithLogger]). Its key
// type must be the scheduler's: New returns an [*OptionError] otherwise.
//
// The callback rules, for f and for the logger's handler alike:
//
//   - A panic or runtime.Goexit in f (or in a method of a value it
//     returns) is logged, and the session goes on; nothing is lost.
//   - f may call any method of the scheduler. The ctx it is given
//     identifies the session's worker: a waiting call given that ctx
//     (Await, Remove, Discard, Close, Shutdown) that would wait for f's own
//     session returns [ErrWouldDeadlock] instead, having done the rest of
//     its work; under [WithMaxConcurrency] a wait given it lends the slot.
//     A waiting call given another ctx is not recognised, and may wait for
//     ever.
//   - While f runs, its session runs nothing else: an f that blocks holds
//     up its session's tasks (and Shutdown, until its ctx ends).
//   - The ctx is never done and must not be kept after f returns.
func WithErrorHandler[K comparable](f func(ctx context.Context, key K, err error)) Option {
	return &errHandlerOption{f}
}

type errHandlerOption struct{ fn any }

func (o *errHandlerOption) apply(opts *options) { opts.errHandler = o.fn }
func (o *errHandlerOption) String() string      { return fmt.Sprintf("WithErrorHandler(%T)", o.fn) }

// WithHighBurst caps the High lane's lead: after n consecutive High tasks in
// a session, if a Normal task of that session is waiting, one Normal task
// runs before the next High one. n must be >= 0; 0 (the default) keeps High
// strictly first, so a stream of High tasks can starve the Normal lane.
func WithHighBurst(n int) Option { return highBurstOption(n) }

// WithSlowTask reports tasks that ran longer than d: each is logged at Warn
// (session, priority, duration) once it returns, and counted in
// [Stats].SlowTasks. No timer runs; the clock is read around each task only
// when this option is set. d must be >= 0; 0 (the default) means off.
func WithSlowTask(d time.Duration) Option { return slowTaskOption(d) }

// WithWaitHistogram records each task's queue wait (submit to start) per
// priority: as p50/p99/max in [Stats].High.Wait and [Stats].Normal.Wait,
// and as counts in the fixed buckets of [HistogramBounds] in
// [PriorityStats].WaitHistogram, for exporters. It costs two clock reads
// and a few atomic adds per task; without it the hot path reads no clock.
func WithWaitHistogram() Option { return waitHistogramOption{} }

// WithRunHistogram records each task's run time (fn's start to its return)
// per priority, as counts in the fixed buckets of [HistogramBounds] in
// [PriorityStats].RunHistogram. It costs two clock reads and a few atomic
// adds per task that runs.
func WithRunHistogram() Option { return runHistogramOption{} }

type (
	yieldAfterOption     int
	maxConcurrencyOption int
	maxQueueOption       int
	loggerOption         struct{ l *slog.Logger }
	yieldIntervalOption  time.Duration
	weightOption         struct{ fn any }
	highBurstOption      int
	slowTaskOption       time.Duration
	waitHistogramOption  struct{}
	runHistogramOption   struct{}
)

func (o yieldIntervalOption) apply(opts *options) { opts.yieldInterval = time.Duration(o) }
func (o *weightOption) apply(opts *options)       { opts.weight = o.fn }
func (o highBurstOption) apply(opts *options)     { opts.highBurst = int(o) }
func (o slowTaskOption) apply(opts *options)      { opts.slowTask = time.Duration(o) }
func (waitHistogramOption) apply(opts *options)   { opts.waitHistogram = true }
func (runHistogramOption) apply(opts *options)    { opts.runHistogram = true }

func (o yieldIntervalOption) String() string {
	return fmt.Sprintf("WithYieldInterval(%v)", time.Duration(o))
}
func (o *weightOption) String() string     { return fmt.Sprintf("WithWeight(%T)", o.fn) }
func (o highBurstOption) String() string   { return fmt.Sprintf("WithHighBurst(%d)", int(o)) }
func (o slowTaskOption) String() string    { return fmt.Sprintf("WithSlowTask(%v)", time.Duration(o)) }
func (waitHistogramOption) String() string { return "WithWaitHistogram()" }
func (runHistogramOption) String() string  { return "WithRunHistogram()" }

func (o yieldAfterOption) apply(opts *options)     { opts.yieldAfter = int(o) }
func (o maxConcurrencyOption) apply(opts *options) { opts.maxConcurrency = int(o) }
func (o maxQueueOption) apply(opts *options)       { opts.maxQueue = int(o) }
func (o loggerOption) apply(opts *options)         { opts.logger = o.l }

func (o yieldAfterOption) String() string     { return fmt.Sprintf("WithYieldAfter(%d)", int(o)) }
func (o maxConcurrencyOption) String() string { return fmt.Sprintf("WithMaxConcurrency(%d)", int(o)) }
func (o maxQueueOption) String() string       { return fmt.Sprintf("WithMaxQueue(%d)", int(o)) }
func (o loggerOption) String() string         { return "WithLogger(...)" }
