// Command yieldtune answers "which WithYieldAfter for my load?". It
// measures what the scheduler's slots run on this machine, then runs a
// load — synthetic, described by flags, or a recorded one replayed from a
// CSV trace — once per threshold (10..50 by default) in several rounds,
// thresholds interleaved, prints each figure's median and range over the
// rounds, and recommends a threshold only when it is better than the
// default on what the user optimises (-objective) by 10% or more and
// beyond that range, and worse on nothing else. Where sessions rarely give
// way, it raises the load (at most -raises times) or says that the
// threshold does not matter for it:
//
//	go run ./bench/cmd/yieldtune -sessions 500 -tasks 40 -work 50us -high 0.05
//	go run ./bench/cmd/yieldtune -objective throughput -trace my-load.csv
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
	"slices"
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
		if c.objective == figHighP99 && !slices.ContainsFunc(t.tasks, func(t traceTask) bool { return t.high }) {
			fmt.Fprintf(stderr, "yieldtune: -objective high-p99: the trace %s has no High tasks (see -h)\n", c.trace)
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
		return fmt.Sprintf(
			"trace %s: %d tasks, %d sessions, mean work %s, mean sleep %s, High %.0f%%, max concurrency %d, over %s "+
				"as recorded",
			c.trace,
			len(tr.tasks),
			len(tr.sessions),
			round(work/n),
			round(sleep/n),
			100*float64(high)/float64(n),
			c.maxConc,
			round(p.span),
		)
	}
	over := "as fast as the producers submit"
	if p.span > 0 {
		over = "over " + round(p.span).String()
	}
	return fmt.Sprintf("%d sessions × %d tasks, work %s, sleep %s, High %.0f%%, max concurrency %d, %d producers, %s",
		c.sessions, c.tasks, c.work, c.sleep, c.high*100, c.maxConc, c.producers, over)
}

// sweep is the command's work once its input is read: calibrate and pace
// the load, run it in rounds, raise it while sessions yield too rarely to
// judge (at most c.raises times), judge, and write the outputs.
func sweep(ctx context.Context, c config, tr *trace, out io.Writer, prog progress) (err error) {
	wrapped := &wrapWriter{w: out}
	defer func() {
		if cerr := wrapped.Close(); err == nil {
			err = cerr
		}
	}()
	var stdout io.Writer = wrapped
	ld, p, err := planLoad(ctx, c, tr)
	if err != nil {
		return err
	}
	ts := c.thresholds()
	fmt.Fprintf(stdout, "load: %s\n%s\n", describe(c, tr, p), calibration(p))
	per := p.perRun()
	est := approx(time.Duration(c.rounds*len(ts)) * per)
	confirm := approx(time.Duration(c.rounds*2) * per)
	if c.raises > 0 && p.span > 0 {
		fmt.Fprintf(
			stdout,
			"sweep: %d rounds × %s (%s), interleaved; about %s (up to %s if the load must be raised %s), and %s more "+
				"to confirm a threshold that looks better\n\n",
			c.rounds,
			plural(len(ts), "threshold"),
			joinInts(ts),
			est,
			approx(time.Duration(c.raises+1)*time.Duration(c.rounds*len(ts))*per),
			times(float64(c.raises)),
			confirm,
		)
	} else {
		fmt.Fprintf(stdout, "sweep: %d rounds × %s (%s), interleaved; about %s, and %s more to confirm a threshold "+
			"that looks better\n\n",
			c.rounds, plural(len(ts), "threshold"), joinInts(ts), est, confirm)
	}
	measure := func(ld load, ts []int, pass string) ([]result, error) {
		return runRounds(ctx, c, ld, p.tasks, ts, prog, pass)
	}
	results, j, err := decide(stdout, c, ld, &p, ts, measure)
	if err != nil {
		return err
	}
	if err := report(stdout, results, j, drift(p, results)); err != nil {
		return err
	}
	if c.csv != "" {
		write := func(w io.Writer) error { return writeCSV(w, results, j, p.offered()) }
		if err := writeFile(c.csv, write); err != nil {
			return err
		}
	}
	title := chartTitle(c, tr)
	for _, out := range []struct{ name, format string }{{c.svg, "svg"}, {c.png, "png"}} {
		if out.name == "" {
			continue
		}
		draw := func(w io.Writer) error { return writeChart(w, out.format, results, j, title) }
		if err := writeFile(out.name, draw); err != nil {
			return err
		}
	}
	return nil
}

// report writes the table, a warning if there is one, and the judgement:
// the objective, the rule, the recommendation and why.
func report(w io.Writer, results []result, j judgement, warning string) error {
	if err := writeTable(w, results, j); err != nil {
		return err
	}
	if warning != "" {
		fmt.Fprintf(w, "\n%s\n", warning)
	}
	_, err := fmt.Fprintf(w, "\nobjective: %s (-objective %s)\n%s\nrecommendation: %s\nwhy: %s\n",
		j.Objective.long(), j.Objective.flag(), ruleText(j.Objective, j.Default, j.HasHigh), j.Answer, j.Why)
	return err
}

// planLoad builds the load a run submits and paces it by the calibration:
// a trace as recorded; a synthetic load over -duration, or so that it
// offers -load times the measured capacity.
func planLoad(ctx context.Context, c config, tr *trace) (load, plan, error) {
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
			return ld, p, fmt.Errorf("calibration: %w", err)
		}
	}
	switch {
	case tr != nil:
		p.span = ld.jobs[len(ld.jobs)-1].at
	case c.paced:
		secs := float64(p.tasks) / (c.load * p.capacity)
		if secs > maxDuration.Seconds() {
			return ld, p, fmt.Errorf(
				"at the measured %.3g tasks/s, -load %v spreads each run's tasks over %.3gh, more than %v; offer "+
					"more (a larger -load) or give fewer -tasks",
				p.capacity,
				c.load,
				secs/3600,
				maxDuration,
			)
		}
		p.span = pace(p.tasks, c.load, p.capacity)
		ld = synthetic(c, iters, p.span)
	default:
		p.span = c.duration
		ld = synthetic(c, iters, p.span)
	}
	return ld, p, nil
}

// runRounds runs ld once per threshold in each of c.rounds rounds and
// returns a result per threshold, in the order of ts. tasks is the number
// of tasks in one run, for the progress bar; pass says which sweep this is
// ("raised 1 of 2, "), empty for the first.
func runRounds(
	ctx context.Context,
	c config,
	ld load,
	tasks int,
	ts []int,
	prog progress,
	pass string,
) ([]result, error) {
	bar := progressbar.NewOptions(c.rounds*len(ts)*tasks,
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
			bar.Describe(fmt.Sprintf("%sround %d/%d WithYieldAfter(%d)", pass, r+1, c.rounds, ts[i]))
			raw, err := runOne(ctx, ld, ts[i], c.maxConc, func(done int) { _ = bar.Set(n*tasks + done) })
			if err != nil {
				return nil, fmt.Errorf("WithYieldAfter(%d): %w", ts[i], err)
			}
			rows[i] = append(rows[i], summarize(raw))
		}
		if prog.lines != nil {
			fmt.Fprintf(
				prog.lines,
				"yieldtune: %sround %d of %d done (%s)\n",
				pass,
				r+1,
				c.rounds,
				time.Since(start).Round(100*time.Millisecond),
			)
		}
	}
	_ = bar.Finish()
	results := make([]result, len(ts))
	for i, t := range ts {
		results[i] = aggregate(t, rows[i])
	}
	return results, nil
}

func chartTitle(c config, tr *trace) string {
	if tr != nil {
		return fmt.Sprintf("yieldtune: trace %s, max concurrency %d", c.trace, c.maxConc)
	}
	return fmt.Sprintf(
		"yieldtune: %d sessions, work %s, High %.0f%%, max concurrency %d",
		c.sessions,
		c.work,
		c.high*100,
		c.maxConc,
	)
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
