package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seqsched/seqsched"
)

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
		res.Median.HighTasks, res.Median.NormalTask = rounds[0].HighTasks, rounds[0].NormalTask
	}
	return res
}

// The recommendation rule. A threshold is measurably better than the
// default when, on one of the two figures the sweep is about (p99 wait
// over all tasks, throughput), its worst round is better than the
// default's best round — the two ranges over the rounds do not overlap —
// and it is not measurably worse in the same sense on the other, nor on
// the p99 wait of High tasks: a threshold that shortens most waits by
// delaying the priority lane is a trade-off, not an improvement, and the
// output names it as one. Among several better thresholds the one with
// the lowest median p99 wait wins, then the highest median throughput,
// then the threshold nearest the default. Otherwise the default stays.
//
// The rule applies only if sessions yielded at the default in every round.
// In a round where none did, every higher threshold schedules the load
// exactly as the default does (no session reached even the default's count
// with others waiting), so any difference there is noise; on the shared
// 2-core box such rounds, in runs too small to yield often, made the
// default lose "beyond the spread" in 2 of 120 sweeps.
//
// Why ranges: with n rounds of two thresholds that do not differ, noise
// alone puts every round of one ahead of every round of the other with
// probability 1/C(2n, n): 5% for 3 rounds, 0.4% for 5. That is why the
// sweep runs 5 rounds by default and refuses fewer than 3; a looser test
// (a margin on one run's figures) recommended 50, then 10, then 50 on
// three runs of the same load.

// ruleText states the rule in the output.
func ruleText(def, rounds int) string {
	return fmt.Sprintf("rule: a threshold replaces the default (%d) only if, over the %d rounds, its worst round beats the default's best "+
		"on p99 wait over all tasks or on throughput, and it is not worse by the same test on the other or on High tasks' p99 wait; "+
		"otherwise, or unless sessions yielded at the default in every round, the default stays", def, rounds)
}

// compare says how a differs from b on one figure: +1 when a is better
// beyond the spread, -1 when worse, 0 when the ranges overlap.
func compare(a, b spread, higherIsBetter bool) int {
	if !higherIsBetter {
		a, b = spread{-a.Med, -a.Hi, -a.Lo}, spread{-b.Med, -b.Hi, -b.Lo}
	}
	switch {
	case a.Lo > b.Hi:
		return 1
	case a.Hi < b.Lo:
		return -1
	}
	return 0
}

// verdict is how one threshold compares with another on both figures.
type verdict struct{ p99, tput, high int }

func versus(a, b result) verdict {
	return verdict{
		p99:  compare(a.P99, b.P99, false),
		tput: compare(a.Throughput, b.Throughput, true),
		high: compare(a.HighP99, b.HighP99, false),
	}
}

// better is the rule: a gain on p99 or throughput, no loss anywhere.
func (v verdict) better() bool {
	return (v.p99 > 0 || v.tput > 0) && v.p99 >= 0 && v.tput >= 0 && v.high >= 0
}

// tradeOff is a gain on p99 or throughput paid for with a loss.
func (v verdict) tradeOff() bool {
	return (v.p99 > 0 || v.tput > 0) && !v.better()
}

func (v verdict) same() bool { return v == verdict{} }

// String is the table's "vs default" cell.
func (v verdict) String() string {
	word := func(n int, better, worse string) string {
		switch {
		case n > 0:
			return better
		case n < 0:
			return worse
		}
		return ""
	}
	parts := slices.DeleteFunc([]string{word(v.p99, "lower p99", "higher p99"), word(v.tput, "faster", "slower"),
		word(v.high, "lower High p99", "higher High p99")},
		func(s string) bool { return s == "" })
	if len(parts) == 0 {
		return "same"
	}
	return strings.Join(parts, ", ")
}

// judgement is what the rule made of a sweep.
type judgement struct {
	Default int   // the default threshold, the baseline
	Pick    int   // the recommended threshold: Default when none is better
	Changed bool  // Pick is not the default
	Band    []int // thresholds indistinguishable from Pick on both figures, Pick included
	Why     string
}

// judge applies the rule to results, which must include the default
// threshold. A sweep in which no session yielded at any threshold measured
// nothing the threshold does: the default stays, and the reason says so.
func judge(results []result, def int) judgement {
	i := slices.IndexFunc(results, func(r result) bool { return r.Threshold == def })
	if i < 0 {
		return judgement{Default: def, Pick: def, Why: fmt.Sprintf("keep the default (%d): it was not measured", def)}
	}
	base := results[i]
	j := judgement{Default: def, Pick: def}
	pick := base
	for _, r := range results {
		if r.Threshold == def || !versus(r, base).better() {
			continue
		}
		if !j.Changed || preferred(r, pick, def) {
			pick, j.Changed = r, true
		}
	}
	j.Pick = pick.Threshold
	for _, r := range results {
		if r.Threshold == pick.Threshold || versus(r, pick).same() {
			j.Band = append(j.Band, r.Threshold)
		}
	}
	slices.Sort(j.Band)
	yielded := slices.ContainsFunc(results, func(r result) bool {
		return slices.ContainsFunc(r.Rounds, func(x row) bool { return x.YieldsPerSec > 0 })
	})
	baseYielded := 0 // rounds in which a session yielded at the default
	for _, x := range base.Rounds {
		if x.YieldsPerSec > 0 {
			baseYielded++
		}
	}
	switch {
	case !yielded:
		j = judgement{Default: def, Pick: def, Band: thresholdsOf(results)}
		j.Why = fmt.Sprintf("keep the default, WithYieldAfter(%d): no session yielded at any threshold, so the threshold makes no difference to this load; offer more work (-load) to see where it matters", def)
	case baseYielded < len(base.Rounds):
		j = judgement{Default: def, Pick: def, Band: thresholdsOf(results)}
		j.Why = fmt.Sprintf("keep the default, WithYieldAfter(%d): sessions yielded at the default in only %d of %d rounds, and a higher threshold runs a round without yields exactly as the default does, so what differs is noise; offer more work (-load, -tasks) to see where it matters",
			def, baseYielded, len(base.Rounds))
	case !j.Changed:
		j.Why = fmt.Sprintf("keep the default, WithYieldAfter(%d): no threshold is measurably better for this load (p99 wait %s, %s tasks/s over the rounds)",
			def, secRange(base.P99), numRange(base.Throughput))
		var trades []string
		for _, r := range results {
			if v := versus(r, base); r.Threshold != def && v.tradeOff() {
				trades = append(trades, fmt.Sprintf("%d (%s)", r.Threshold, v))
			}
		}
		if len(trades) > 0 {
			j.Why += "; trade-offs, not improvements: " + strings.Join(trades, ", ")
		}
	default:
		v := versus(pick, base)
		var gains []string
		if v.p99 > 0 {
			gains = append(gains, fmt.Sprintf("p99 wait %s against the default's %s", secRange(pick.P99), secRange(base.P99)))
		}
		if v.tput > 0 {
			gains = append(gains, fmt.Sprintf("%s tasks/s against the default's %s", numRange(pick.Throughput), numRange(base.Throughput)))
		}
		j.Why = fmt.Sprintf("WithYieldAfter(%d): %s", pick.Threshold, strings.Join(gains, ", and "))
	}
	return j
}

// preferred says whether a is a better pick than b, both better than the
// default: lower median p99 wait, then higher median throughput, then
// nearer the default.
func preferred(a, b result, def int) bool {
	switch {
	case a.P99.Med != b.P99.Med:
		return a.P99.Med < b.P99.Med
	case a.Throughput.Med != b.Throughput.Med:
		return a.Throughput.Med > b.Throughput.Med
	}
	da, db := abs(a.Threshold-def), abs(b.Threshold-def)
	return da < db || (da == db && a.Threshold < b.Threshold)
}

func abs(n int) int { return max(n, -n) }

func thresholdsOf(results []result) []int {
	ts := make([]int, len(results))
	for i, r := range results {
		ts[i] = r.Threshold
	}
	return ts
}

// secRange shows a spread of seconds as "12.3ms (11.9ms–13.0ms)".
func secRange(s spread) string {
	d := func(x float64) time.Duration { return round(time.Duration(x * float64(time.Second))) }
	return fmt.Sprintf("%v (%v–%v)", d(s.Med), d(s.Lo), d(s.Hi))
}

// numRange shows a spread of rates as "25012 (24100–25800)".
func numRange(s spread) string {
	return fmt.Sprintf("%.0f (%.0f–%.0f)", s.Med, s.Lo, s.Hi)
}

// defaultThreshold is the baseline every sweep measures.
const defaultThreshold = seqsched.DefaultYieldAfter
