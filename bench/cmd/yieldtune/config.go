package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"runtime"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/bench"
)

// config describes the load and the sweep.
type config struct {
	sessions   int           // sessions receiving tasks
	tasks      int           // tasks per session, per threshold
	work       time.Duration // CPU work per task (calibrated spin)
	sleep      time.Duration // time each task sleeps after its work (I/O-like)
	high       float64       // fraction of tasks submitted as High
	maxConc    int           // WithMaxConcurrency; 0 means no limit
	producers  int           // goroutines submitting
	duration   time.Duration // submissions of one threshold are spread over this; 0: no pacing
	load       float64       // offered work, in multiples of what the slots run; sets duration unless -duration
	paced      bool          // duration comes from load (false: from -duration)
	from, to   int           // WithYieldAfter range swept
	step       int           // sweep step
	rounds     int           // each threshold runs once per round, thresholds interleaved
	objective  figure        // what the user optimises: the figure the rule looks for a gain on
	raises     int           // times the sweep may raise the load when sessions yield too rarely
	quick      bool          // smaller load and sweep
	trace      string        // CSV file of a recorded load to replay instead of the synthetic one
	csv, svg   string        // output files, empty for none
	png        string        // the chart as PNG, empty for none
	noProgress bool          // hide the progress bar
}

// Limits on the size of a run, so that a mistyped flag gets an error
// instead of a crash or a run that never ends.
const (
	maxTasks     = 10_000_000     // sessions × tasks, per threshold: each keeps a wait sample
	maxProducers = 10_000         // goroutines submitting
	maxDuration  = 24 * time.Hour // the time one threshold's submissions are spread over
	minRounds    = 3              // fewer cannot tell a threshold from noise (see judge.go)
	maxRounds    = 1000
	maxRaises    = 5 // 2^5 = 32 times the offered load, and 6 sweeps
)

// usageError is an error in the command line (exit code 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// parseFlags reads args into a validated config. -quick replaces the load
// defaults with a smaller load; flags given explicitly still win.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("yieldtune", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&c.sessions, "sessions", 100, "sessions receiving tasks")
	fs.IntVar(&c.tasks, "tasks", 200, "tasks per session, per threshold and round")
	fs.DurationVar(&c.work, "work", 50*time.Microsecond, "CPU work per task (busy computation)")
	fs.DurationVar(&c.sleep, "sleep", 0, "time each task sleeps after its work, like waiting on I/O")
	fs.Float64Var(&c.high, "high", 0.1, "fraction of tasks submitted as High, 0..1")
	fs.IntVar(&c.maxConc, "max-concurrency", runtime.GOMAXPROCS(0), "WithMaxConcurrency (0: no limit)")
	fs.IntVar(&c.producers, "producers", 2, "goroutines submitting tasks")
	fs.DurationVar(
		&c.duration,
		"duration",
		0,
		"spread each threshold's submissions evenly over this, instead of the time -load gives",
	)
	fs.Float64Var(
		&c.load,
		"load",
		1.5,
		"offered work as a multiple of what the slots can run; above 1, queues grow and sessions compete for slots",
	)
	fs.IntVar(&c.from, "from", seqsched.MinYieldAfter, "first WithYieldAfter value")
	fs.IntVar(&c.to, "to", seqsched.MaxYieldAfter, "last WithYieldAfter value")
	fs.IntVar(&c.step, "step", 10, "WithYieldAfter step")
	fs.IntVar(
		&c.rounds,
		"rounds",
		5,
		fmt.Sprintf("rounds; each runs every threshold once, interleaved (%d..%d)", minRounds, maxRounds),
	)
	objective := fs.String(
		"objective",
		figP99.flag(),
		"what to optimise: p99 (wait over all tasks), throughput, or high-p99 (wait of High tasks)",
	)
	fs.IntVar(
		&c.raises,
		"raises",
		2,
		fmt.Sprintf(
			"when sessions yield too rarely to judge, raise the offered load ×%g and sweep again, at most this many "+
				"times (0..%d)",
			raiseFactor,
			maxRaises,
		),
	)
	fs.BoolVar(&c.quick, "quick", false, "smaller load (-tasks 100) and sweep (10, 30, 50): about 5 s on 2 cores")
	fs.StringVar(
		&c.trace,
		"trace",
		"",
		"replay the recorded load in this CSV file (offset,session,priority,work,sleep) instead of a synthetic one",
	)
	fs.StringVar(&c.csv, "csv", "", "write every round's figures as CSV to this file")
	fs.StringVar(&c.svg, "svg", "", "draw throughput and p99 wait against the threshold to this SVG file")
	fs.StringVar(&c.png, "png", "", "draw the same chart to this PNG file")
	fs.BoolVar(
		&c.noProgress,
		"no-progress",
		false,
		"no progress on stderr (a bar on a terminal, a line per round otherwise)",
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(
				stderr,
				"usage: yieldtune [flags]\n\nSweeps seqsched.WithYieldAfter over a synthetic or recorded load in "+
					"rounds, and recommends\na value only when it is better than the default on the objective by 10% "+
					"or more, beyond the\nspread, and worse on nothing else. The manual: "+
					"bench/cmd/yieldtune/README.md.",
			)
			fs.PrintDefaults()
			return c, err
		}
		return c, usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return c, usagef("unexpected argument %q (all options are flags)", fs.Arg(0))
	}
	var err error
	if c.objective, err = parseObjective(*objective); err != nil {
		return c, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.quick {
		if !set["tasks"] {
			c.tasks = 100
		}
		if !set["step"] {
			c.step = 20
		}
	}
	if c.trace != "" {
		for _, name := range []string{"sessions", "tasks", "work", "sleep", "high", "producers", "duration", "load"} {
			if set[name] {
				return c, usagef("-%s: does not apply to -trace, which replays the recorded load", name)
			}
		}
	}
	switch {
	case set["duration"] && set["load"]:
		return c, usagef("-load and -duration: give one or the other")
	case set["duration"] && c.duration <= 0:
		return c, usagef("-duration %v: must be positive", c.duration)
	case c.duration > maxDuration:
		return c, usagef("-duration %v: must be at most %v", c.duration, maxDuration)
	}
	if err := c.validate(); err != nil {
		return c, err
	}
	if !set["duration"] {
		secs := c.spreadSeconds()
		if secs > maxDuration.Seconds() {
			return c, usagef(
				"-load %v: spreads each threshold's tasks over %.3gh, more than %v; offer more (a larger -load) or "+
					"give fewer -tasks",
				c.load,
				secs/3600,
				maxDuration,
			)
		}
		c.duration, c.paced = c.spread(), true
	}
	return c, nil
}

// spinIters is how many bench.Spin iterations make one task's -work: 0
// for none.
func (c config) spinIters() int {
	if c.work <= 0 {
		return 0
	}
	return bench.SpinIters(c.work)
}

// spread is the time over which submissions go so that the offered work
// would be load times what the slots run if they ran at the speed the
// flags imply. A task holds its slot for work+sleep, and only its work
// needs a CPU: with no concurrency limit, every session is a slot and
// GOMAXPROCS bounds the work. Tasks that take no time get no pacing (0):
// producers submit as fast as they can.
//
// That speed ignores the scheduler's own cost, the producers and whatever
// else the machine runs, so it is an upper bound: parseFlags uses spread to
// refuse a run that could not fit in maxDuration, and the sweep paces the
// load by a measured capacity instead (see calibrate).
func (c config) spread() time.Duration {
	return time.Duration(c.spreadSeconds() * float64(time.Second))
}

// spreadSeconds is spread in seconds, which cannot overflow.
func (c config) spreadSeconds() float64 {
	per := c.work + c.sleep
	if per <= 0 {
		return 0
	}
	slots := c.maxConc
	if slots == 0 {
		slots = c.sessions
	}
	rate := float64(slots) / per.Seconds() // tasks per second the slots can run
	if c.work > 0 {
		rate = min(rate, float64(runtime.GOMAXPROCS(0))/c.work.Seconds())
	}
	return float64(c.sessions*c.tasks) / (c.load * rate)
}

// highEvery is n where every n-th task is High: 0 for none. A fraction too
// small for one High task in the run gives more than the run's tasks.
func (c config) highEvery() int {
	if c.high <= 0 {
		return 0
	}
	return int(min(1/c.high+0.5, float64(c.sessions*c.tasks+1)))
}

func (c config) validate() error {
	bad := func(flag string, v any, why string) error {
		return usagef("-%s %v: %s", flag, v, why)
	}
	switch {
	case c.sessions < 1:
		return bad("sessions", c.sessions, "must be at least 1")
	case c.tasks < 1:
		return bad("tasks", c.tasks, "must be at least 1")
	case c.tasks > maxTasks/c.sessions:
		return usagef("-sessions %d × -tasks %d: more than %d tasks per threshold", c.sessions, c.tasks, maxTasks)
	case c.work < 0:
		return bad("work", c.work, "must not be negative")
	case c.sleep < 0:
		return bad("sleep", c.sleep, "must not be negative")
	case !(c.high >= 0 && c.high <= 1): // NaN too
		return bad("high", c.high, "must be between 0 and 1")
	case c.maxConc < 0:
		return bad("max-concurrency", c.maxConc, "must be >= 0 (0 means no limit)")
	case c.producers < 1 || c.producers > maxProducers:
		return bad("producers", c.producers, fmt.Sprintf("must be 1..%d", maxProducers))
	case c.load <= 0 || math.IsInf(c.load, 0) || math.IsNaN(c.load):
		return bad("load", c.load, "must be a positive number")
	case c.from < seqsched.MinYieldAfter || c.from > seqsched.MaxYieldAfter:
		return bad("from", c.from, fmt.Sprintf("must be %d..%d", seqsched.MinYieldAfter, seqsched.MaxYieldAfter))
	case c.to < c.from || c.to > seqsched.MaxYieldAfter:
		return bad("to", c.to, fmt.Sprintf("must be -from..%d", seqsched.MaxYieldAfter))
	case c.step < 1:
		return bad("step", c.step, "must be at least 1")
	case c.rounds < minRounds || c.rounds > maxRounds:
		return bad("rounds", c.rounds, fmt.Sprintf("must be %d..%d", minRounds, maxRounds))
	case c.raises < 0 || c.raises > maxRaises:
		return bad("raises", c.raises, fmt.Sprintf("must be 0..%d", maxRaises))
	case c.objective == figHighP99 && c.trace == "" && (c.highEvery() == 0 || c.highEvery() > c.sessions*c.tasks):
		return usagef("-objective high-p99: the load has no High tasks (-high %v)", c.high)
	}
	return nil
}

// thresholds lists the WithYieldAfter values swept; the last is always
// included, and so is the default, the baseline of the rule.
func (c config) thresholds() []int {
	var ts []int
	if c.from > defaultThreshold {
		ts = append(ts, defaultThreshold)
	}
	for n := c.from; n <= c.to; n += c.step {
		ts = append(ts, n)
	}
	if ts[len(ts)-1] != c.to {
		ts = append(ts, c.to)
	}
	return ts
}
