package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/seqsched/seqsched/bench"
)

// sample is one task's wait: submit to start.
type sample struct {
	session int
	high    bool
	wait    time.Duration
}

// raw is what one threshold's run measured.
type raw struct {
	threshold int
	elapsed   time.Duration   // first submit to last completion
	samples   []sample        // one per task that ran
	finished  []time.Duration // per session: its last completion, from the start
	done      []int           // per session: tasks completed
	yields    uint64          // Stats().Yields during the run
}

// row is one line of the table.
type row struct {
	Threshold             int
	Throughput            float64 // tasks/s
	NormalP50, NormalP99  time.Duration
	NormalMax             time.Duration
	HighP50, HighP99      time.Duration
	HighMax               time.Duration
	AllP99                time.Duration // every task's wait, what the rule compares
	Jain                  float64       // over per-session throughput
	WorstSessionMaxWait   time.Duration
	YieldsPerSec          float64
	HighTasks, NormalTask int
}

// summarize turns a run's measurements into a row.
func summarize(r raw) row {
	out := row{Threshold: r.threshold}
	var normal, high, all []time.Duration
	worst := make(map[int]time.Duration)
	for _, s := range r.samples {
		all = append(all, s.wait)
		if s.high {
			high = append(high, s.wait)
		} else {
			normal = append(normal, s.wait)
		}
		worst[s.session] = max(worst[s.session], s.wait)
	}
	secs := r.elapsed.Seconds()
	if secs > 0 {
		out.Throughput = float64(len(r.samples)) / secs
		out.YieldsPerSec = float64(r.yields) / secs
	}
	pct := bench.Percentile
	out.NormalP50, out.NormalP99, out.NormalMax = pct(normal, 50), pct(normal, 99), pct(normal, 100)
	out.HighP50, out.HighP99, out.HighMax = pct(high, 50), pct(high, 99), pct(high, 100)
	out.AllP99 = pct(all, 99)
	out.HighTasks, out.NormalTask = len(high), len(normal)
	for _, w := range worst {
		out.WorstSessionMaxWait = max(out.WorstSessionMaxWait, w)
	}
	var xs []float64
	for i, f := range r.finished {
		if r.done[i] > 0 && f > 0 {
			xs = append(xs, float64(r.done[i])/f.Seconds())
		}
	}
	out.Jain = bench.Jain(xs)
	return out
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(100 * time.Nanosecond)
}

var header = []string{"yield", "tasks/s", "range", "all p99", "range", "high p99", "range",
	"jain", "worst sess max", "yields/s", "vs default"}

// cells is a threshold's line of the table: medians over the rounds, and
// the range of each figure the rule compares. (Normal tasks' waits, and
// every lane's p50 and max, are in the CSV.)
func (r result) cells(v string) []string {
	m := r.Median
	sec := func(x float64) string { return round(time.Duration(x * float64(time.Second))).String() }
	return []string{
		strconv.Itoa(r.Threshold),
		fmt.Sprintf("%.0f", r.Throughput.Med), fmt.Sprintf("%.0f–%.0f", r.Throughput.Lo, r.Throughput.Hi),
		sec(r.P99.Med), sec(r.P99.Lo) + "–" + sec(r.P99.Hi),
		sec(r.HighP99.Med), sec(r.HighP99.Lo) + "–" + sec(r.HighP99.Hi),
		fmt.Sprintf("%.3f", m.Jain), round(m.WorstSessionMaxWait).String(), fmt.Sprintf("%.0f", m.YieldsPerSec), v,
	}
}

// writeTable prints one line per threshold, medians over the rounds, with
// how each compares with the default under the rule.
func writeTable(w io.Writer, results []result, def int) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	line := func(cells []string) {
		for _, c := range cells {
			fmt.Fprint(tw, c, "\t")
		}
		fmt.Fprintln(tw)
	}
	line(header)
	i := slices.IndexFunc(results, func(r result) bool { return r.Threshold == def })
	for _, r := range results {
		v := "default"
		if r.Threshold != def && i >= 0 {
			v = versus(r, results[i]).String()
		}
		line(r.cells(v))
	}
	return tw.Flush()
}

// csvHeader names writeCSV's columns.
var csvHeader = []string{"yield_after", "round", "tasks_per_s", "normal_p50_us", "normal_p99_us", "normal_max_us",
	"high_p50_us", "high_p99_us", "high_max_us", "all_p99_us", "jain", "worst_session_max_wait_us", "yields_per_s"}

// writeCSV writes one record per threshold and round (rounds numbered
// from 1), with durations in microseconds, so that the file loads as
// numbers and the spread can be recomputed from it.
func writeCSV(w io.Writer, results []result) error {
	cw := csv.NewWriter(w)
	us := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) }
	_ = cw.Write(csvHeader)
	for _, res := range results {
		for i, r := range res.Rounds {
			_ = cw.Write([]string{strconv.Itoa(r.Threshold), strconv.Itoa(i + 1), strconv.FormatFloat(r.Throughput, 'f', 0, 64),
				us(r.NormalP50), us(r.NormalP99), us(r.NormalMax), us(r.HighP50), us(r.HighP99), us(r.HighMax),
				us(r.AllP99), strconv.FormatFloat(r.Jain, 'f', 4, 64), us(r.WorstSessionMaxWait),
				strconv.FormatFloat(r.YieldsPerSec, 'f', 0, 64)})
		}
	}
	cw.Flush()
	return cw.Error()
}
