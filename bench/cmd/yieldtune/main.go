// Command yieldtune answers "which WithYieldAfter for my load?". It
// measures what the scheduler's slots run on this machine, then runs a
// load — synthetic, described by flags, or a recorded one replayed from a
// CSV trace — once per threshold (10..50 by default) in several rounds,
// thresholds interleaved, prints each figure's median and range over the
// rounds, and recommends a threshold only when it beats the default beyond
// that range:
//
//	go run ./bench/cmd/yieldtune -sessions 500 -tasks 200 -work 50us -high 0.05
//	go run ./bench/cmd/yieldtune -trace my-load.csv
//
// Its manual, with the trace format, is README.md next to this file; -h
// lists the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command; it returns the exit code: 0, 1 for a failed run, 2
// for bad flags or a bad trace.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	var usage *usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "yieldtune: %v (see -h)\n", usage)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "yieldtune: %v\n", err)
		return 2
	}
	var tr *trace
	if c.trace != "" {
		t, err := readTrace(c.trace)
		if err != nil {
			fmt.Fprintf(stderr, "yieldtune: -trace %s: %v\n", c.trace, err)
			return 2
		}
		tr = &t
	}
	var p progress
	switch {
	case c.noProgress:
	case isTerminal(stderr):
		p.bar = stderr
	default:
		p.lines = stderr
	}
	if err := sweep(ctx, c, tr, stdout, p); err != nil {
		fmt.Fprintf(stderr, "yieldtune: %v\n", err)
		return 1
	}
	return 0
}

func readTrace(name string) (trace, error) {
	f, err := os.Open(name)
	if err != nil {
		return trace{}, err
	}
	defer f.Close()
	return parseTrace(f)
}

// isTerminal says whether w is a terminal: only there does a progress bar,
// redrawn with carriage returns, read as one line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress is where the sweep reports how far it got: a bar redrawn in
// place (on a terminal), a line per round (in a log), or neither.
type progress struct {
	bar   io.Writer
	lines io.Writer
}

// calWindow is how long one calibration batch lasts at least.
const calWindow = 150 * time.Millisecond

// plan is how the sweep's load is paced, from the calibration.
type plan struct {
	capacity float64       // tasks/s the slots ran in calibration; +Inf: tasks take no time
	span     time.Duration // first to last submission of a run
	tasks    int           // tasks per run
}

// offered is the offered rate as a multiple of the capacity: 0 when it
// cannot be said (all tasks at once, or tasks that take no time).
func (p plan) offered() float64 {
	if p.span <= 0 || math.IsInf(p.capacity, 1) || p.capacity <= 0 {
		return 0
	}
	return float64(p.tasks) / p.span.Seconds() / p.capacity
}

// perRun estimates how long one run takes: its span, or the time the
// slots need for its tasks if that is longer.
func (p plan) perRun() time.Duration {
	d := p.span
	if !math.IsInf(p.capacity, 1) && p.capacity > 0 {
		d = max(d, time.Duration(float64(p.tasks)/p.capacity*float64(time.Second)))
	}
	return d
}

// describe is the load line of the output.
func describe(c config, tr *trace, p plan) string {
	if tr != nil {
		var high int
		var work, sleep time.Duration
		for _, t := range tr.tasks {
			work += t.work
			sleep += t.sleep
			if t.high {
				high++
			}
		}
		n := time.Duration(len(tr.tasks))
		return fmt.Sprintf("trace %s: %d tasks, %d sessions, mean work %s, mean sleep %s, High %.0f%%, max concurrency %d, over %s as recorded",
			c.trace, len(tr.tasks), len(tr.sessions), round(work/n), round(sleep/n), 100*float64(high)/float64(n), c.maxConc, round(p.span))
	}
	over := "as fast as the producers submit"
	if p.span > 0 {
		over = "over " + round(p.span).String()
	}
	return fmt.Sprintf("%d sessions × %d tasks, work %s, sleep %s, High %.0f%%, max concurrency %d, %d producers, %s",
		c.sessions, c.tasks, c.work, c.sleep, c.high*100, c.maxConc, c.producers, over)
}

// calibration is the output's line about what the slots ran.
func calibration(p plan) string {
	if math.IsInf(p.capacity, 1) {
		return "calibration: the tasks take no measurable time; submitted as fast as the producers can"
	}
	s := fmt.Sprintf("calibration: the slots ran %.0f tasks/s (median of %d timed batches)", p.capacity, calRuns)
	if o := p.offered(); o > 0 {
		s += fmt.Sprintf("; offered %.2f× that", o)
	} else {
		s += "; all tasks submitted at once"
	}
	return s
}

// slowdownLimit is how far below what the calibration promised the
// sweep's median throughput may fall before the output warns.
const slowdownLimit = 0.8

// slowdown warns when the slots ran the sweep much slower than they ran
// the calibration: something else took the machine, so the load offered
// more than the calibration line says, and the figures are of a busier
// machine. Empty when there is nothing to say.
func slowdown(p plan, results []result) string {
	if math.IsInf(p.capacity, 1) || p.capacity <= 0 {
		return ""
	}
	expect := p.capacity // all at once, or overloaded: the slots' speed
	if o := p.offered(); o > 0 && o < 1 {
		expect = o * p.capacity // underloaded: the offered rate
	}
	var all []float64
	for _, r := range results {
		for _, x := range r.Rounds {
			all = append(all, x.Throughput)
		}
	}
	got := spreadOf(all).Med
	if got >= slowdownLimit*expect {
		return ""
	}
	return fmt.Sprintf("warning: the sweep ran %.0f tasks/s (median of all runs), %.0f%% of the %.0f the calibration promised: "+
		"other work took the machine, so the load was heavier than offered and the spread is wider; run again on a quieter machine",
		got, 100*got/expect, expect)
}

// pace is the span over which total tasks go to offer load times capacity.
func pace(total int, load, capacity float64) time.Duration {
	if math.IsInf(capacity, 1) || capacity <= 0 {
		return 0
	}
	return time.Duration(float64(total) / (load * capacity) * float64(time.Second))
}

func takesTime(ld load) bool {
	for _, j := range ld.jobs {
		if j.iters > 0 || j.sleep > 0 {
			return true
		}
	}
	return false
}

func sweep(ctx context.Context, c config, tr *trace, stdout io.Writer, prog progress) error {
	iters := c.spinIters()
	var ld load
	if tr != nil {
		ld = replay(*tr)
	} else {
		ld = synthetic(c, iters, 0)
	}
	p := plan{capacity: math.Inf(1), tasks: len(ld.jobs)}
	if takesTime(ld) {
		var err error
		if p.capacity, err = calibrate(ctx, ld, c.maxConc, calWindow); err != nil {
			return fmt.Errorf("calibration: %w", err)
		}
	}
	switch {
	case tr != nil:
		p.span = ld.jobs[len(ld.jobs)-1].at
	case c.paced:
		secs := float64(p.tasks) / (c.load * p.capacity)
		if secs > maxDuration.Seconds() {
			return fmt.Errorf("at the measured %.3g tasks/s, -load %v spreads each run's tasks over %.3gh, more than %v; offer more (a larger -load) or give fewer -tasks",
				p.capacity, c.load, secs/3600, maxDuration)
		}
		p.span = pace(p.tasks, c.load, p.capacity)
		ld = synthetic(c, iters, p.span)
	default:
		p.span = c.duration
		ld = synthetic(c, iters, p.span)
	}
	ts := c.thresholds()
	fmt.Fprintf(stdout, "load: %s\n%s\n", describe(c, tr, p), calibration(p))
	fmt.Fprintf(stdout, "sweep: %d rounds × %s (%s), interleaved; about %s\n\n",
		c.rounds, plural(len(ts), "threshold"), joinInts(ts), approx(time.Duration(c.rounds*len(ts))*p.perRun()))

	runs := c.rounds * len(ts)
	bar := progressbar.NewOptions(runs*p.tasks,
		progressbar.OptionSetWriter(orDiscard(prog.bar)),
		progressbar.OptionSetVisibility(prog.bar != nil),
		progressbar.OptionSetDescription("yieldtune"),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	rows := make([][]row, len(ts))
	start := time.Now()
	for r := range c.rounds {
		// Round r starts at the r-th threshold, so that over len(ts)
		// rounds each threshold runs once in each position: a machine
		// that slows down during a round does not always hit the same one.
		for k := range ts {
			i := (r + k) % len(ts)
			n := r*len(ts) + k
			bar.Describe(fmt.Sprintf("round %d/%d WithYieldAfter(%d)", r+1, c.rounds, ts[i]))
			raw, err := runOne(ctx, ld, ts[i], c.maxConc, func(done int) { _ = bar.Set(n*p.tasks + done) })
			if err != nil {
				return fmt.Errorf("WithYieldAfter(%d): %w", ts[i], err)
			}
			rows[i] = append(rows[i], summarize(raw))
		}
		if prog.lines != nil {
			fmt.Fprintf(prog.lines, "yieldtune: round %d of %d done (%s)\n", r+1, c.rounds, time.Since(start).Round(100*time.Millisecond))
		}
	}
	_ = bar.Finish()
	results := make([]result, len(ts))
	for i, t := range ts {
		results[i] = aggregate(t, rows[i])
	}
	if err := writeTable(stdout, results, defaultThreshold); err != nil {
		return err
	}
	if w := slowdown(p, results); w != "" {
		fmt.Fprintf(stdout, "\n%s\n", w)
	}
	j := judge(results, defaultThreshold)
	fmt.Fprintf(stdout, "\n%s\nrecommendation: %s\n", ruleText(defaultThreshold, c.rounds), j.Why)
	if len(j.Band) > 1 {
		fmt.Fprintf(stdout, "indistinguishable from WithYieldAfter(%d) on every figure the rule compares: %s\n", j.Pick, joinInts(j.Band))
	}
	if c.csv != "" {
		if err := writeFile(c.csv, func(w io.Writer) error { return writeCSV(w, results) }); err != nil {
			return err
		}
	}
	title := chartTitle(c, tr)
	for _, out := range []struct{ name, format string }{{c.svg, "svg"}, {c.png, "png"}} {
		if out.name == "" {
			continue
		}
		if err := writeFile(out.name, func(w io.Writer) error { return writeChart(w, out.format, results, j, title) }); err != nil {
			return err
		}
	}
	return nil
}

func chartTitle(c config, tr *trace) string {
	if tr != nil {
		return fmt.Sprintf("yieldtune: trace %s, max concurrency %d", c.trace, c.maxConc)
	}
	return fmt.Sprintf("yieldtune: %d sessions, work %s, High %.0f%%, max concurrency %d", c.sessions, c.work, c.high*100, c.maxConc)
}

// approx rounds an estimate of time to two or three figures.
func approx(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return round(d)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	return f.Close()
}
