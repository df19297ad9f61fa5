package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// synthResult is a threshold's result from per-round throughputs and p99
// waits; every round yielded.
func synthResult(threshold int, tput []float64, p99 []time.Duration) result {
	rows := make([]row, len(tput))
	for i := range rows {
		rows[i] = row{Threshold: threshold, Throughput: tput[i], AllP99: p99[i], YieldsPerSec: 1}
	}
	return aggregate(threshold, rows)
}

var ms = time.Millisecond

func TestSpreadIsMedianAndRange(t *testing.T) {
	assert.Equal(t, spread{Med: 3, Lo: 1, Hi: 9}, spreadOf([]float64{9, 1, 3}))
	assert.Equal(t, spread{Med: 2.5, Lo: 1, Hi: 9}, spreadOf([]float64{9, 1, 3, 2}), "even count: mean of the middle two")
}

func TestAggregateTakesEachFiguresMedian(t *testing.T) {
	r := synthResult(30, []float64{100, 300, 200}, []time.Duration{5 * ms, 1 * ms, 3 * ms})
	assert.Equal(t, spread{Med: 200, Lo: 100, Hi: 300}, r.Throughput)
	assert.Equal(t, spread{Med: 0.003, Lo: 0.001, Hi: 0.005}, r.P99)
	assert.Equal(t, 3*ms, r.Median.AllP99)
	assert.Equal(t, 200.0, r.Median.Throughput)
	assert.Len(t, r.Rounds, 3)
}

// Rounds that overlap the default's on both figures are no evidence: the
// default stays, and the output says so in those words.
func TestJudgeKeepsTheDefaultWhenNoThresholdIsMeasurablyBetter(t *testing.T) {
	results := []result{
		synthResult(10, []float64{100, 110, 90}, []time.Duration{10 * ms, 12 * ms, 8 * ms}),
		// A better median on both figures, but inside the default's range.
		synthResult(30, []float64{105, 112, 95}, []time.Duration{9 * ms, 11 * ms, 8 * ms}),
		synthResult(50, []float64{100, 100, 100}, []time.Duration{10 * ms, 10 * ms, 10 * ms}),
	}
	j := judge(results, 10)
	assert.False(t, j.Changed)
	assert.Equal(t, 10, j.Pick)
	assert.Equal(t, []int{10, 30, 50}, j.Band, "all indistinguishable from the default")
	assert.Equal(t, "keep the default, WithYieldAfter(10): no threshold is measurably better for this load (p99 wait 10ms (8ms–12ms), 100 (90–110) tasks/s over the rounds)", j.Why)
}

// Touching ranges overlap: the worst round must be strictly better.
func TestJudgeNeedsTheWorstRoundStrictlyBetterThanTheDefaultsBest(t *testing.T) {
	results := []result{
		synthResult(10, []float64{100, 100, 100}, []time.Duration{10 * ms, 12 * ms, 11 * ms}),
		synthResult(20, []float64{100, 100, 100}, []time.Duration{10 * ms, 5 * ms, 6 * ms}),
	}
	assert.False(t, judge(results, 10).Changed, "20's worst round (10ms) only ties the default's best")
	results[1] = synthResult(20, []float64{100, 100, 100}, []time.Duration{9 * ms, 5 * ms, 6 * ms})
	j := judge(results, 10)
	assert.True(t, j.Changed)
	assert.Equal(t, 20, j.Pick)
	assert.Equal(t, "WithYieldAfter(20): p99 wait 6ms (5ms–9ms) against the default's 11ms (10ms–12ms)", j.Why)
}

// A lower p99 bought with measurably less throughput is a trade-off, not
// an improvement; the same throughput and a measurably lower p99 is.
func TestJudgeRefusesAGainOnOneFigurePaidForOnTheOther(t *testing.T) {
	results := []result{
		synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms}),
		synthResult(20, []float64{80, 81, 79}, []time.Duration{2 * ms, 3 * ms, 4 * ms}),       // faster waits, slower: refused
		synthResult(30, []float64{120, 121, 119}, []time.Duration{20 * ms, 21 * ms, 22 * ms}), // faster, longer waits: refused
	}
	j := judge(results, 10)
	assert.False(t, j.Changed, j.Why)
	assert.Equal(t, []int{10}, j.Band, "both differ from the default")

	results = append(results, synthResult(40, []float64{120, 121, 119}, []time.Duration{10 * ms, 11 * ms, 12 * ms}))
	j = judge(results, 10)
	assert.Equal(t, 40, j.Pick, "more throughput, the same waits")
	assert.Equal(t, "WithYieldAfter(40): 120 (119–121) tasks/s against the default's 100 (99–101)", j.Why)
}

// Among several better thresholds the lowest median p99 wins, then the
// highest median throughput, then the one nearest the default; the band
// holds those indistinguishable from the pick.
func TestJudgePicksTheLowestP99AmongTheBetterOnes(t *testing.T) {
	base := synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms})
	results := []result{
		base,
		synthResult(20, []float64{100, 101, 99}, []time.Duration{6 * ms, 7 * ms, 8 * ms}),
		synthResult(30, []float64{100, 101, 99}, []time.Duration{4 * ms, 5 * ms, 6 * ms}),
		synthResult(40, []float64{100, 101, 99}, []time.Duration{3 * ms, 5 * ms, 7 * ms}),
		synthResult(50, []float64{100, 101, 99}, []time.Duration{5 * ms, 6 * ms, 7 * ms}),
	}
	j := judge(results, 10)
	assert.Equal(t, 30, j.Pick, "30 and 40 tie on the median p99 and throughput: 30 is nearer the default")
	assert.Equal(t, []int{20, 30, 40, 50}, j.Band)
	assert.Equal(t, "WithYieldAfter(30): p99 wait 5ms (4ms–6ms) against the default's 11ms (10ms–12ms)", j.Why)
	assert.Contains(t, ruleText(10, 3), "its worst round beats the default's best on p99 wait over all tasks or on throughput")
}

// A sweep in which no session ever yielded measured nothing the threshold
// does: whatever the figures, the default stays and the reason says why.
func TestJudgeSaysTheThresholdDoesNotMatterWhenNoSessionYielded(t *testing.T) {
	results := []result{
		synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms}),
		synthResult(30, []float64{100, 101, 99}, []time.Duration{1 * ms, 2 * ms, 3 * ms}),
	}
	for i := range results {
		for k := range results[i].Rounds {
			results[i].Rounds[k].YieldsPerSec = 0
		}
	}
	j := judge(results, 10)
	assert.False(t, j.Changed)
	assert.Equal(t, 10, j.Pick)
	assert.Equal(t, []int{10, 30}, j.Band)
	assert.Contains(t, j.Why, "keep the default, WithYieldAfter(10): no session yielded at any threshold")
	assert.NotContains(t, j.Why, "\n")

	for k := range results[0].Rounds { // the default yielded in every round: the rule applies
		results[0].Rounds[k].YieldsPerSec = 0.5
	}
	assert.Equal(t, 30, judge(results, 10).Pick)
}

// In a round in which no session yielded at the default, a higher
// threshold schedules the load exactly as the default does: the rule needs
// yields at the default in every round before it sees a difference.
func TestJudgeNeedsYieldsAtTheDefaultInEveryRound(t *testing.T) {
	results := []result{
		synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms}),
		synthResult(30, []float64{130, 131, 129}, []time.Duration{1 * ms, 2 * ms, 3 * ms}),
	}
	results[0].Rounds[1].YieldsPerSec = 0
	j := judge(results, 10)
	assert.False(t, j.Changed)
	assert.Equal(t, []int{10, 30}, j.Band)
	assert.Equal(t, "keep the default, WithYieldAfter(10): sessions yielded at the default in only 2 of 3 rounds, "+
		"and a higher threshold runs a round without yields exactly as the default does, so what differs is noise; "+
		"offer more work (-load, -tasks) to see where it matters", j.Why)
}

func TestVerdictSaysHowAThresholdDiffersFromTheDefault(t *testing.T) {
	base := synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms})
	for _, tc := range []struct {
		r    result
		want string
	}{
		{synthResult(20, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms}), "same"},
		{synthResult(20, []float64{90, 91, 89}, []time.Duration{10 * ms, 11 * ms, 12 * ms}), "slower"},
		{synthResult(20, []float64{90, 91, 89}, []time.Duration{1 * ms, 2 * ms, 3 * ms}), "lower p99, slower"},
		{synthResult(20, []float64{110, 111, 109}, []time.Duration{20 * ms, 21 * ms, 22 * ms}), "higher p99, faster"},
	} {
		assert.Equal(t, tc.want, versus(tc.r, base).String())
	}
}

// The table shows each threshold's medians, the ranges the rule compares,
// and the verdict against the default.
func TestTableShowsMediansRangesAndVerdicts(t *testing.T) {
	results := []result{
		synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms}),
		synthResult(20, []float64{90, 91, 89}, []time.Duration{1 * ms, 2 * ms, 3 * ms}),
	}
	var out bytes.Buffer
	require.NoError(t, writeTable(&out, results, 10))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, "header and two lines:\n%s", out.String())
	assert.Equal(t, []string{"yield", "tasks/s", "range", "all", "p99", "range"}, strings.Fields(lines[0])[:6])
	assert.Equal(t, []string{"10", "100", "99–101", "11ms", "10ms–12ms"}, strings.Fields(lines[1])[:5])
	assert.Equal(t, "default", strings.Fields(lines[1])[len(strings.Fields(lines[1]))-1])
	assert.Equal(t, []string{"lower", "p99,", "slower"}, strings.Fields(lines[2])[len(strings.Fields(lines[2]))-3:])
}

// A threshold that shortens most waits by delaying the High lane is not
// recommended; the answer names it as a trade-off.
func TestJudgeRefusesAGainPaidForByHighTasks(t *testing.T) {
	withHigh := func(r result, high ...time.Duration) result {
		for i := range r.Rounds {
			r.Rounds[i].HighP99 = high[i]
		}
		return aggregate(r.Threshold, r.Rounds)
	}
	results := []result{
		withHigh(synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms}), 2*ms, 3*ms, 4*ms),
		withHigh(synthResult(50, []float64{100, 101, 99}, []time.Duration{5 * ms, 6 * ms, 7 * ms}), 8*ms, 9*ms, 10*ms),
	}
	j := judge(results, 10)
	assert.False(t, j.Changed)
	assert.Equal(t, "keep the default, WithYieldAfter(10): no threshold is measurably better for this load (p99 wait 11ms (10ms–12ms), 100 (99–101) tasks/s over the rounds); "+
		"trade-offs, not improvements: 50 (lower p99, higher High p99)", j.Why)

	results[1] = withHigh(results[1], 3*ms, 4*ms, 5*ms) // High waits within the default's range
	assert.Equal(t, 50, judge(results, 10).Pick)
}
