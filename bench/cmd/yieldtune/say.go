package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// How the rule's findings are said. Every output — the table, the why:
// line, the CSV and the chart — takes its words from these, so that they
// say the same thing: each threshold against the default, and only
// against the default.

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

// against is the reason of a judgement under the rule: the default's
// figure, then every other threshold in the order of the sweep with its
// verdict, its figure, the change, and any other figure it is worse on:
// "the default's p99 wait is 10ms (8ms–12ms) over 5 rounds; 30 same: 11ms
// (9ms–12ms), +3%; 50 trade-off: 8ms (7ms–8.5ms), -20%, but throughput
// -11% worse".
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
		s := fmt.Sprintf(
			"%d %s: %s%s, %s",
			a.Threshold,
			j.verdictCell(a.Threshold),
			rangeOf(obj, obj.of(results[k])),
			over,
			percent(a.Figures[obj].Change),
		)
		var costs []string // worse on another figure than the objective
		for _, f := range j.figures() {
			if f != obj && a.Figures[f].Rel == worse {
				costs = append(costs, fmt.Sprintf("%s %s", f, a.Figures[f]))
			}
		}
		switch {
		case len(costs) > 0 && a.Figures[obj].Rel == worse:
			s += ", and " + strings.Join(costs, ", ")
		case len(costs) > 0:
			s += ", but " + strings.Join(costs, ", ")
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// ruleText states the rule in the output.
func ruleText(obj figure, def int, hasHigh bool) string {
	var others []string
	for _, f := range []figure{figP99, figThroughput, figHighP99} {
		if f != obj && (f != figHighP99 || hasHigh) {
			others = append(others, f.String())
		}
	}
	return fmt.Sprintf(
		"rule: a threshold replaces the default (%d) only if its median %s over the rounds is better than the "+
			"default's by %.0f%% or more "+
			"and its worst round beats the default's best, and it is worse on neither %s "+
			"(worse: its range wholly beyond the default's, or its median %.0f%% or more worse); "+
			"a threshold that passes runs as many rounds again, with the default, and must pass over all of them; "+
			"and the rule applies only if sessions gave way at the default at least %s per 100 tasks in every round",
		def,
		obj,
		margin*100,
		strings.Join(others, " nor "),
		margin*100,
		times(minYieldsPer100),
	)
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
