package main

import (
	"slices"
	"time"
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
