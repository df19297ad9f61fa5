package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/seqsched/seqsched"
)

// Calibration and pacing. Before the sweep paces its load, it measures what the
// slots actually run on this machine, now, with this load's tasks. A
// capacity computed from the flags (slots / task time) ignores the
// scheduler's own cost, the producers and whatever else the machine is
// running; on a loaded 2-core box it was 3 to 5 times the truth, so a load
// printed as "offered 1.25×" was an overload of several times.
const (
	calRuns     = 3       // timed batches; the capacity is their median
	maxCalBatch = 1 << 20 // tasks in one batch at most
)

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

// calibrate returns how many of ld's tasks per second the slots run when
// every session always has work waiting: batches of ld's jobs (cycling
// through them, sessions and work as in ld) are submitted all at once with
// the default threshold and timed from the first submit to the last
// completion. The batch, a whole multiple of the sessions, grows until
// one lasts at least window; then calRuns batches of that size are timed
// and the median rate is returned. +Inf means the tasks take no
// measurable time.
func calibrate(ctx context.Context, ld load, maxConc int, window time.Duration) (float64, error) {
	batch := func(n int) (time.Duration, error) {
		b := load{jobs: make([]job, n), sessions: ld.sessions, producers: ld.producers}
		for i := range b.jobs {
			b.jobs[i] = ld.jobs[i%len(ld.jobs)]
			b.jobs[i].at = 0
		}
		r, err := runOne(ctx, b, seqsched.DefaultYieldAfter, maxConc, func(int) {})
		return r.elapsed, err
	}
	// Whole multiples of the sessions: each session of a synthetic load
	// gets as many tasks, so that the batch does not end with a tail in
	// which some slots idle.
	whole := func(n int) int { return (n + ld.sessions - 1) / ld.sessions * ld.sessions }
	n := whole(1) // as many tasks as sessions: a load of long tasks calibrates in few of them
	for {
		d, err := batch(n)
		if err != nil {
			return 0, err
		}
		if d == 0 { // a clock that did not move: tasks take no time
			return math.Inf(1), nil
		}
		if d >= window || n >= maxCalBatch {
			break
		}
		grow := min(max(1.5*float64(window)/float64(d), 2), 64)
		n = whole(min(int(float64(n)*grow), maxCalBatch))
	}
	rates := make([]float64, calRuns)
	for i := range rates {
		d, err := batch(n)
		if err != nil {
			return 0, err
		}
		rates[i] = math.Inf(1)
		if d > 0 {
			rates[i] = float64(n) / d.Seconds()
		}
	}
	slices.Sort(rates)
	return rates[len(rates)/2], nil
}

// calibration is the output's line about what the slots ran.
func calibration(p plan) string {
	if math.IsInf(p.capacity, 1) {
		if p.span > 0 {
			return "calibration: none, the tasks take no measurable time"
		}
		return "calibration: none, the tasks take no measurable time; submitted as fast as the producers can"
	}
	s := fmt.Sprintf("calibration: the slots ran %.0f tasks/s (median of %d timed batches)", p.capacity, calRuns)
	if o := p.offered(); o > 0 {
		s += fmt.Sprintf("; offered %.2f× that", o)
	} else {
		s += "; all tasks submitted at once"
	}
	return s
}

// driftLimit is how far the sweep's median throughput may stray from
// what the calibration promised, below or above, before the output warns:
// below 80% of it, or above 1/0.8 = 1.25 times it.
const driftLimit = 0.8

// drift warns when the slots ran the sweep at a speed the calibration did
// not promise. Much slower: something else took the machine during the
// sweep, so the load offered more than the calibration line says, and the
// figures are of a busier machine. Much faster: something else had the
// machine while it calibrated, so the capacity was measured low and the
// load offered less than the line says; a sweep meant to overload the
// slots may not have. Only an overloaded (or all-at-once) sweep can show
// that it ran faster: an underloaded one runs at the offered rate whatever
// the slots could do. Empty when there is nothing to say.
func drift(p plan, results []result) string {
	if math.IsInf(p.capacity, 1) || p.capacity <= 0 {
		return ""
	}
	o := p.offered()
	expect := p.capacity // all at once, or overloaded: the slots' speed
	if o > 0 && o < 1 {
		expect = o * p.capacity // underloaded: the offered rate
	}
	var all []float64
	for _, r := range results {
		for _, x := range r.Rounds {
			all = append(all, x.Throughput)
		}
	}
	got := spreadOf(all).Med
	switch {
	case got < driftLimit*expect:
		return fmt.Sprintf(
			"warning: the sweep ran %.0f tasks/s (median of all runs), %.0f%% of the %.0f the calibration promised: "+
				"other work took the machine, so the load was heavier than offered and the spread is wider; run "+
				"again on a quieter machine",
			got,
			100*got/expect,
			expect,
		)
	case got > expect/driftLimit && (o == 0 || o >= 1):
		really := ""
		if o > 0 { // the sweep kept up with what was offered, or ran at the slots' real speed
			really = fmt.Sprintf(" (at most %.2f× what the slots ran, not %.2f×)", o*p.capacity/got, o)
		}
		return fmt.Sprintf(
			"warning: the sweep ran %.0f tasks/s (median of all runs), %.2f× the %.0f the calibration measured: "+
				"other work had the machine while it calibrated, so the load was lighter than offered%s "+
				"and the slots may not have been overloaded; run again on a steadier machine",
			got,
			got/expect,
			expect,
			really,
		)
	}
	return ""
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
