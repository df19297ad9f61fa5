package main

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/seqsched/seqsched"
)

// Calibration: before the sweep paces its load, it measures what the
// slots actually run on this machine, now, with this load's tasks. A
// capacity computed from the flags (slots / task time) ignores the
// scheduler's own cost, the producers and whatever else the machine is
// running; on a loaded 2-core box it was 3 to 5 times the truth, so a load
// printed as "offered 1.25×" was an overload of several times.
const (
	calRuns     = 3       // timed batches; the capacity is their median
	maxCalBatch = 1 << 20 // tasks in one batch at most
)

// calibrate returns how many of ld's tasks per second the slots run when
// every session always has work waiting: batches of ld's jobs (cycling
// through them, sessions and work as in ld) are submitted all at once with
// the default threshold and timed from the first submit to the last
// completion. The batch, a whole multiple of the sessions, grows until one lasts at least window; then calRuns
// batches of that size are timed and the median rate is returned. +Inf
// means the tasks take no measurable time.
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
	n := whole(min(len(ld.jobs), max(ld.sessions, 64)))
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
