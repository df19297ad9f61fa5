package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// Raising and confirming. One sweep is not always enough to judge: the
// load may leave sessions no reason to give way (then it is raised), and
// a threshold may pass the rule on noise that lasted the whole sweep
// (then it is measured again before it is recommended).

// measurer runs the rounds of a sweep of thresholds ts on load ld; pass
// says which sweep it is, for the progress ("raised 1 of 2, "). sweep's
// runs the load; tests give scripted results.
type measurer func(ld load, ts []int, pass string) ([]result, error)

// decide measures thresholds ts and judges them. While sessions give way
// too rarely at the default for the rule to apply, it raises the load
// (at most c.raises times) and sweeps again. A threshold that passes the
// rule is confirmed: it and the default run c.rounds more rounds, and the
// rule is applied again over all the rounds; a threshold that passes only
// then is confirmed in turn. Notes on raises and confirmations go to w.
// p's span follows the raises.
func decide(w io.Writer, c config, ld load, p *plan, ts []int, measure measurer) ([]result, judgement, error) {
	var results []result
	var j judgement
	for raised := 0; ; raised++ {
		pass := ""
		if raised > 0 {
			pass = fmt.Sprintf("raised %d of %d, ", raised, c.raises)
		}
		var err error
		if results, err = measure(ld, ts, pass); err != nil {
			return nil, j, err
		}
		j = judge(results, defaultThreshold, c.objective)
		if j.Applies || raised == c.raises {
			break
		}
		if p.span <= 0 {
			fmt.Fprintf(w, "not raised: %s, and every task is already submitted at once\n\n", shortOf(j))
			break
		}
		ld, p.span = faster(ld, raiseFactor), time.Duration(float64(p.span)/raiseFactor)
		fmt.Fprintf(w, "raised (%d of %d): %s; the load now %s\n\n", raised+1, c.raises, shortOf(j), offering(*p))
	}
	confirmed := map[int]bool{}
	for j.Changed && !confirmed[j.Pick] {
		pick := j.Pick
		confirmed[pick] = true
		more, err := measure(ld, []int{defaultThreshold, pick}, fmt.Sprintf("confirming %d, ", pick))
		if err != nil {
			return nil, j, err
		}
		results = merge(results, more)
		j = judge(results, defaultThreshold, c.objective)
		held := "it held: it is recommended"
		if j.Pick != pick {
			held = "it did not hold: " + j.verdictCell(pick) + " over all its rounds"
		}
		fmt.Fprintf(
			w,
			"confirm: WithYieldAfter(%d) looked better on %s; it and the default ran %d more rounds, and %s\n\n",
			pick,
			c.objective,
			c.rounds,
			held,
		)
	}
	return results, j, nil
}

// merge adds the rounds in more to those of the same threshold in
// results.
func merge(results, more []result) []result {
	out := slices.Clone(results)
	for _, m := range more {
		i := slices.IndexFunc(out, func(r result) bool { return r.Threshold == m.Threshold })
		if i < 0 {
			out = append(out, m)
			continue
		}
		out[i] = aggregate(m.Threshold, append(slices.Clone(out[i].Rounds), m.Rounds...))
	}
	return out
}

// raiseFactor is how much each raise multiplies the offered load by: the
// submissions of a run are spread over 1/raiseFactor of the time.
const raiseFactor = 2.0

// faster is ld with its submissions raiseFactor times as fast.
func faster(ld load, by float64) load {
	ld.jobs = slices.Clone(ld.jobs)
	for i := range ld.jobs {
		ld.jobs[i].at = time.Duration(float64(ld.jobs[i].at) / by)
	}
	return ld
}

// shortOf says how many of the default's rounds had too few yields.
func shortOf(j judgement) string {
	return fmt.Sprintf(
		"sessions gave way at the default less than %s per 100 tasks in %d of %d rounds",
		times(minYieldsPer100),
		j.Short,
		j.Rounds,
	)
}

// offering says what a raised load offers.
func offering(p plan) string {
	if o := p.offered(); o > 0 {
		return fmt.Sprintf("offers %.2f× what the slots ran", o)
	}
	return fmt.Sprintf("spreads its submissions over %s", round(p.span))
}
