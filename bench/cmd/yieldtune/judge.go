package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/seqsched/seqsched"
)

// The recommendation rule. It is a pure function of the measurements
// (judge), so that it is tested on recorded sweeps, not on live ones.
//
// The user names the figure they optimise, the objective: the p99 wait
// over all tasks (the default), throughput, or the p99 wait of High
// tasks. Every threshold is compared with the default, and only with it,
// on each figure, in one of three words:
//
//   - better: its median is better than the default's by margin (10%) or
//     more, and its worst round is better than the default's best round
//     (the two ranges over the rounds do not overlap);
//   - worse: its range lies wholly on the worse side of the default's (any
//     size), or its median is worse by margin or more;
//   - same: neither.
//
// The words are deliberately lopsided: a gain must be large and beyond
// the spread to count, a loss need only be one of the two. A threshold
// replaces the default only if it is better on the objective and worse on
// no other figure; among several, the best median on the objective wins,
// then the one nearest the default. A threshold that passes is confirmed
// by as many rounds again before it is recommended (see decide), because
// noise on a shared machine can last a whole sweep.
//
// Why ranges: with n rounds of two thresholds that do not differ, noise
// alone puts every round of one ahead of every round of the other with
// probability 1/C(2n, n): 5% for 3 rounds, 0.4% for 5. The margin keeps a
// real but small effect from being sold as a reason to change: on the
// shared 2-core box, a 2% throughput gain "beyond the spread" came with a
// worse p99 wait, and the next run of the same load said the opposite.
//
// The threshold can only matter where sessions give way. Below the
// default's count no session yields at any threshold, and every higher
// threshold schedules a round in which sessions rarely gave way at the
// default almost exactly as the default does, so what differs is noise.
// The rule therefore applies only if sessions gave way at the default at
// least minYieldsPer100 times per 100 tasks in every round; otherwise the
// sweep raises the load (see decide) and, past its budget, says that the
// threshold does not matter for this load.
const (
	margin          = 0.10 // the least effect on the objective that counts
	minYieldsPer100 = 1.0  // yields per 100 tasks at the default, in every round
)

// defaultThreshold is the baseline every sweep measures.
const defaultThreshold = seqsched.DefaultYieldAfter

// figure is one of the figures the rule weighs; the objective is one of
// them.
type figure int

const (
	figP99        figure = iota // p99 wait over all tasks: lower is better
	figThroughput               // tasks/s: higher is better
	figHighP99                  // p99 wait of High tasks: lower is better
	numFigures
)

// flag is the figure's -objective value.
func (f figure) flag() string {
	return [...]string{"p99", "throughput", "high-p99"}[f]
}

// String is the figure's name in the output.
func (f figure) String() string {
	return [...]string{"p99 wait", "throughput", "High p99 wait"}[f]
}

// long is the figure's name with what it is over, for the objective line.
func (f figure) long() string {
	return [...]string{"p99 wait over all tasks", "throughput, tasks completed per second", "p99 wait of High tasks"}[f]
}

func (f figure) higherIsBetter() bool { return f == figThroughput }

func (f figure) of(r result) spread {
	switch f {
	case figP99:
		return r.P99
	case figThroughput:
		return r.Throughput
	}
	return r.HighP99
}

// parseObjective reads an -objective value.
func parseObjective(s string) (figure, error) {
	for f := range numFigures {
		if s == f.flag() {
			return f, nil
		}
	}
	return 0, usagef("-objective %q: must be p99, throughput or high-p99", s)
}

// relation is how a threshold compares with the default on one figure.
type relation int

const (
	same relation = iota
	better
	worse
)

func (r relation) String() string { return [...]string{"same", "better", "worse"}[r] }

// comparison is one threshold against the default on one figure.
type comparison struct {
	Change float64 // the median's change from the default's: 0.12 is 12% more
	Rel    relation
}

// compare is the rule's word for candidate c against the default d on f.
func compare(f figure, c, d spread) comparison {
	change := 0.0
	switch {
	case d.Med != 0:
		change = (c.Med - d.Med) / d.Med
	case c.Med > 0:
		change = math.Inf(1)
	}
	gain := change
	ahead := c.Lo > d.Hi  // c's worst round is better than d's best
	behind := c.Hi < d.Lo // ... worse
	if !f.higherIsBetter() {
		gain = -change
		ahead, behind = behind, ahead
	}
	const eps = 1e-9 // a change of exactly the margin counts
	switch {
	case gain >= margin-eps && ahead:
		return comparison{change, better}
	case behind || gain <= -margin+eps:
		return comparison{change, worse}
	}
	return comparison{change, same}
}

// verdict is a threshold's standing against the default under the rule.
type verdict int

const (
	isDefault  verdict = iota
	isBetter           // better on the objective, worse on nothing
	isSame             // same on the objective, worse on nothing
	isWorse            // not better on the objective, and worse on some figure
	isTradeOff         // better on the objective, worse on another figure
	notJudged          // the rule did not apply: too few yields
)

func (v verdict) String() string {
	return [...]string{"default", "better", "same", "worse", "trade-off", "not judged"}[v]
}

// assessment is one threshold against the default.
type assessment struct {
	Threshold int
	Figures   [numFigures]comparison
	Verdict   verdict
}

// judgement is what the rule made of a sweep.
type judgement struct {
	Objective figure
	Default   int
	Pick      int          // the recommended threshold: Default when none is better
	Changed   bool         // Pick is not the default
	Applies   bool         // sessions gave way at the default often enough for the rule
	HasHigh   bool         // the load has High tasks, so their wait is weighed
	Rounds    int          // the default's rounds
	Short     int          // the default's rounds with too few yields
	Each      []assessment // one per result, in the results' order
	Answer    string       // the recommendation, one line: the same in the text and the chart
	Why       string       // the figures it rests on
}

// figures are those the rule weighs for this load.
func (j judgement) figures() []figure {
	if j.HasHigh {
		return []figure{figP99, figThroughput, figHighP99}
	}
	return []figure{figP99, figThroughput}
}

// assessmentOf is threshold t's assessment.
func (j judgement) assessmentOf(t int) assessment {
	i := slices.IndexFunc(j.Each, func(a assessment) bool { return a.Threshold == t })
	if i < 0 {
		return assessment{Threshold: t, Verdict: notJudged}
	}
	return j.Each[i]
}

// yieldsPer100 is how many times sessions gave way per 100 tasks in one
// run: 0 for a run with no tasks.
func yieldsPer100(r row) float64 {
	if r.Tasks == 0 {
		return 0
	}
	return 100 * float64(r.Yields) / float64(r.Tasks)
}

// judge applies the rule to results, which hold the default threshold,
// with objective obj. It is a pure function of the measurements.
func judge(results []result, def int, obj figure) judgement {
	j := judgement{Objective: obj, Default: def, Pick: def}
	j.HasHigh = slices.ContainsFunc(results, func(r result) bool {
		return slices.ContainsFunc(r.Rounds, func(x row) bool { return x.HighTasks > 0 })
	})
	i := slices.IndexFunc(results, func(r result) bool { return r.Threshold == def })
	if i < 0 {
		j.Answer = fmt.Sprintf("keep the default, WithYieldAfter(%d): it was not measured", def)
		return j
	}
	base := results[i]
	j.Rounds = len(base.Rounds)
	var short []string // the default's rounds with too few yields
	for _, x := range base.Rounds {
		if y := yieldsPer100(x); y < minYieldsPer100 {
			short = append(short, fmt.Sprintf("%.2g", y))
		}
	}
	j.Short = len(short)
	j.Applies = len(short) == 0 && len(base.Rounds) > 0
	for _, r := range results {
		a := assessment{Threshold: r.Threshold}
		for _, f := range j.figures() {
			a.Figures[f] = compare(f, f.of(r), f.of(base))
		}
		a.Verdict = standing(a, j)
		j.Each = append(j.Each, a)
	}
	var pick *result
	for k, r := range results {
		if j.Each[k].Verdict == isBetter && (pick == nil || preferred(r, *pick, obj, def)) {
			pick = &results[k]
		}
	}
	if pick != nil {
		j.Pick, j.Changed = pick.Threshold, true
	}

	keep := fmt.Sprintf("keep the default, WithYieldAfter(%d): ", def)
	switch {
	case !j.Applies && !slices.ContainsFunc(results, yielded):
		j.Answer = keep + "the threshold does not matter for this load"
		j.Why = "no session gave way at any threshold, so every threshold scheduled it alike"
	case !j.Applies:
		j.Answer = keep + "the threshold does not matter for this load"
		j.Why = fmt.Sprintf(
			"sessions gave way at the default less than %s per 100 tasks in %d of %d rounds (%s per 100), "+
				"so every higher threshold schedules it almost as the default does, and what differs is noise",
			times(minYieldsPer100),
			len(short),
			len(base.Rounds),
			strings.Join(short, ", "),
		)
	case j.Changed:
		a := j.assessmentOf(j.Pick)
		j.Answer = fmt.Sprintf("WithYieldAfter(%d): better than the default (%d) on %s by %s, beyond the spread",
			j.Pick, def, obj, strings.TrimPrefix(percent(math.Abs(a.Figures[obj].Change)), "+"))
	default:
		j.Answer = keep + "no threshold is better on " + obj.String()
	}
	if j.Applies {
		j.Why = j.against(results, base)
	}
	return j
}

// standing is a's verdict under the rule.
func standing(a assessment, j judgement) verdict {
	switch {
	case a.Threshold == j.Default:
		return isDefault
	case !j.Applies:
		return notJudged
	}
	costs := slices.ContainsFunc(j.figures(), func(f figure) bool { return a.Figures[f].Rel == worse })
	switch {
	case a.Figures[j.Objective].Rel == better && costs:
		return isTradeOff
	case a.Figures[j.Objective].Rel == better:
		return isBetter
	case costs:
		return isWorse
	}
	return isSame
}

func yielded(r result) bool {
	return slices.ContainsFunc(r.Rounds, func(x row) bool { return x.Yields > 0 })
}

// preferred says whether a is a better pick than b, both better than the
// default: the better median on the objective, then nearer the default.
func preferred(a, b result, obj figure, def int) bool {
	ma, mb := obj.of(a).Med, obj.of(b).Med
	if ma != mb {
		return (ma > mb) == obj.higherIsBetter()
	}
	da, db := abs(a.Threshold-def), abs(b.Threshold-def)
	return da < db || (da == db && a.Threshold < b.Threshold)
}

func abs(n int) int { return max(n, -n) }
