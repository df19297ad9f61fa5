package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

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
// then the one nearest the default.
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
// sweep raises the load (see sweep) and, past its budget, says that the
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

// String is the comparison as the table, the CSV and the chart show it:
// "+12% worse".
func (c comparison) String() string {
	return fmt.Sprintf("%s %s", percent(c.Change), c.Rel)
}

// percent shows a change as "+12%", "-3%" or "0%", cut toward zero rather
// than rounded, so that a change below the margin never reads as the
// margin ("+9%", not "+10%", for 9.7%).
func percent(x float64) string {
	if math.IsInf(x, 0) {
		return fmt.Sprintf("%+.0f", x)[:1] + "inf%"
	}
	const eps = 1e-6 // what float arithmetic loses: 1.2/1 - 1 is 19.999...%
	v := math.Trunc(x*100 + math.Copysign(eps, x))
	if v == 0 {
		return "0%"
	}
	return fmt.Sprintf("%+.0f%%", v)
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
	isSame             // same on the objective
	isWorse            // worse on the objective
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

// cell is what the outputs say of threshold t on figure f: "default",
// "+12% worse", or only the change when the rule did not apply.
func (j judgement) cell(t int, f figure) string {
	a := j.assessmentOf(t)
	switch {
	case a.Verdict == isDefault:
		return "default"
	case !j.Applies:
		return percent(a.Figures[f].Change)
	}
	return a.Figures[f].String()
}

// verdictCell is threshold t's verdict as the outputs say it.
func (j judgement) verdictCell(t int) string {
	a := j.assessmentOf(t)
	if j.Changed && t == j.Pick {
		return "better, recommended"
	}
	return a.Verdict.String()
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
		j.Why = fmt.Sprintf("sessions gave way at the default less than %s per 100 tasks in %d of %d rounds (%s per 100), "+
			"so every higher threshold schedules it almost as the default does, and what differs is noise",
			times(minYieldsPer100), len(short), len(base.Rounds), strings.Join(short, ", "))
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
	switch a.Figures[j.Objective].Rel {
	case worse:
		return isWorse
	case same:
		return isSame
	}
	for _, f := range j.figures() {
		if a.Figures[f].Rel == worse {
			return isTradeOff
		}
	}
	return isBetter
}

// against is the reason of a judgement under the rule: the default's
// figure, then every other threshold in the order of the sweep with its
// verdict, its figure and the change: "the default's p99 wait is 10ms
// (8ms–12ms) over 5 rounds; 30 same: 11ms (9ms–12ms), +3%; 50 trade-off:
// 8ms (7ms–8.5ms), -20%, but throughput -11% worse".
func (j judgement) against(results []result, base result) string {
	obj := j.Objective
	parts := []string{fmt.Sprintf("the default's %s is %s over %d rounds", obj, rangeOf(obj, obj.of(base)), j.Rounds)}
	for k, a := range j.Each {
		if a.Verdict == isDefault {
			continue
		}
		over := ""
		if n := len(results[k].Rounds); n != j.Rounds {
			over = fmt.Sprintf(" over %d rounds", n)
		}
		s := fmt.Sprintf("%d %s: %s%s, %s", a.Threshold, j.verdictCell(a.Threshold), rangeOf(obj, obj.of(results[k])), over, percent(a.Figures[obj].Change))
		if a.Verdict == isTradeOff {
			var costs []string
			for _, f := range j.figures() {
				if a.Figures[f].Rel == worse {
					costs = append(costs, fmt.Sprintf("%s %s", f, a.Figures[f]))
				}
			}
			s += ", but " + strings.Join(costs, ", ")
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
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

// ruleText states the rule in the output.
func ruleText(obj figure, def int, hasHigh bool) string {
	var others []string
	for _, f := range []figure{figP99, figThroughput, figHighP99} {
		if f != obj && (f != figHighP99 || hasHigh) {
			others = append(others, f.String())
		}
	}
	return fmt.Sprintf("rule: a threshold replaces the default (%d) only if its median %s over the rounds is better than the default's by %.0f%% or more "+
		"and its worst round beats the default's best, and it is worse on neither %s "+
		"(worse: its range wholly beyond the default's, or its median %.0f%% or more worse); "+
		"a threshold that passes runs as many rounds again, with the default, and must pass over all of them; "+
		"and the rule applies only if sessions gave way at the default at least %s per 100 tasks in every round",
		def, obj, margin*100, strings.Join(others, " nor "), margin*100, times(minYieldsPer100))
}

// times says "once", "twice" or "2.5 times".
func times(x float64) string {
	switch x {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%g times", x)
}

// rangeOf shows a figure's spread: "12.3ms (11.9ms–13ms)" or
// "25012 tasks/s (24100–25800)".
func rangeOf(f figure, s spread) string {
	if f == figThroughput {
		return fmt.Sprintf("%.0f tasks/s (%.0f–%.0f)", s.Med, s.Lo, s.Hi)
	}
	return fmt.Sprintf("%v (%v–%v)", secs(s.Med), secs(s.Lo), secs(s.Hi))
}

// secs is a figure in seconds as a rounded duration.
func secs(x float64) time.Duration { return round(time.Duration(x * float64(time.Second))) }

// spread is one figure over the rounds: its median and its range.
type spread struct{ Med, Lo, Hi float64 }

func spreadOf(xs []float64) spread {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return spread{}
	}
	return spread{Med: median(s), Lo: s[0], Hi: s[len(s)-1]}
}

// median of sorted xs: the middle one, or the mean of the two middle ones.
func median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// result is one threshold over all rounds.
type result struct {
	Threshold  int
	Rounds     []row  // one per round, in the order they ran
	Median     row    // each figure's median over the rounds
	Throughput spread // tasks/s
	P99        spread // p99 wait over all tasks, in seconds
	HighP99    spread // p99 wait of High tasks, in seconds; all 0 without High tasks
	Yields     spread // yields per 100 tasks
}

// aggregate turns each threshold's rounds into a result.
func aggregate(threshold int, rounds []row) result {
	res := result{Threshold: threshold, Rounds: rounds}
	col := func(f func(row) float64) spread {
		xs := make([]float64, len(rounds))
		for i, r := range rounds {
			xs[i] = f(r)
		}
		return spreadOf(xs)
	}
	dur := func(f func(row) time.Duration) time.Duration {
		return time.Duration(col(func(r row) float64 { return float64(f(r)) }).Med)
	}
	res.Throughput = col(func(r row) float64 { return r.Throughput })
	res.P99 = col(func(r row) float64 { return r.AllP99.Seconds() })
	res.HighP99 = col(func(r row) float64 { return r.HighP99.Seconds() })
	res.Yields = col(yieldsPer100)
	res.Median = row{
		Threshold:           threshold,
		Throughput:          res.Throughput.Med,
		NormalP50:           dur(func(r row) time.Duration { return r.NormalP50 }),
		NormalP99:           dur(func(r row) time.Duration { return r.NormalP99 }),
		NormalMax:           dur(func(r row) time.Duration { return r.NormalMax }),
		HighP50:             dur(func(r row) time.Duration { return r.HighP50 }),
		HighP99:             dur(func(r row) time.Duration { return r.HighP99 }),
		HighMax:             dur(func(r row) time.Duration { return r.HighMax }),
		AllP99:              dur(func(r row) time.Duration { return r.AllP99 }),
		Jain:                col(func(r row) float64 { return r.Jain }).Med,
		WorstSessionMaxWait: dur(func(r row) time.Duration { return r.WorstSessionMaxWait }),
		YieldsPerSec:        col(func(r row) float64 { return r.YieldsPerSec }).Med,
	}
	if len(rounds) > 0 {
		res.Median.HighTasks, res.Median.Tasks = rounds[0].HighTasks, rounds[0].Tasks
	}
	return res
}

func thresholdsOf(results []result) []int {
	ts := make([]int, len(results))
	for i, r := range results {
		ts[i] = r.Threshold
	}
	return ts
}
