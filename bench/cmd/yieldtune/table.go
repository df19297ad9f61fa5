package main

import (
	"encoding/csv"
	"fmt"
	"io"
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
	Threshold            int
	Throughput           float64 // tasks/s
	NormalP50, NormalP99 time.Duration
	NormalMax            time.Duration
	HighP50, HighP99     time.Duration
	HighMax              time.Duration
	AllP99               time.Duration // every task's wait, what the rule compares
	Jain                 float64       // over per-session throughput
	WorstSessionMaxWait  time.Duration
	YieldsPerSec         float64
	Yields               uint64 // times a session gave way
	Tasks, HighTasks     int    // tasks run, and how many of them were High
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
	out.Tasks, out.HighTasks, out.Yields = len(r.samples), len(high), r.yields
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

// writeTable prints one line per threshold, in the order of the sweep:
// each figure the rule weighs as its median, its range over the rounds and
// its comparison with the default, then how often sessions gave way and
// the threshold's verdict: the same words as the text, the CSV and the
// chart. So that no line is wider than width, it is two tables, one above
// the other, each starting with the threshold: the first two figures, then
// the rest and the verdict.
func writeTable(w io.Writer, results []result, j judgement) error {
	figs := j.figures()
	split := min(2, len(figs))
	if err := writeColumns(w, results, j, figs[:split], false); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return writeColumns(w, results, j, figs[split:], true)
}

// writeColumns is one of writeTable's tables: the threshold, figs, and
// with last the columns that close the table.
func writeColumns(w io.Writer, results []result, j judgement, figs []figure, last bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	line := func(cells []string) {
		for _, c := range cells {
			fmt.Fprint(tw, c, "\t")
		}
		fmt.Fprintln(tw)
	}
	head := []string{"yield"}
	for _, f := range figs {
		head = append(head, columnName(f), "range", "vs default")
	}
	if last {
		head = append(head, "yields/100 tasks", "jain", "worst sess max", "verdict")
	}
	line(head)
	for _, r := range results {
		cells := []string{strconv.Itoa(r.Threshold)}
		for _, f := range figs {
			s := f.of(r)
			if f == figThroughput {
				cells = append(cells, fmt.Sprintf("%.0f", s.Med), fmt.Sprintf("%.0f–%.0f", s.Lo, s.Hi))
			} else {
				cells = append(cells, secs(s.Med).String(), fmt.Sprintf("%v–%v", secs(s.Lo), secs(s.Hi)))
			}
			cells = append(cells, j.cell(r.Threshold, f))
		}
		if last {
			cells = append(
				cells,
				fmt.Sprintf("%.2g–%.2g", r.Yields.Lo, r.Yields.Hi),
				fmt.Sprintf("%.3f", r.Median.Jain),
				round(r.Median.WorstSessionMaxWait).String(),
				j.verdictCell(r.Threshold),
			)
		}
		line(cells)
	}
	return tw.Flush()
}

// columnName is a figure's column in the table.
func columnName(f figure) string {
	return [...]string{"p99 wait", "tasks/s", "High p99"}[f]
}

// csvHeader names writeCSV's columns.
var csvHeader = []string{"yield_after", "round", "offered", "tasks", "high_tasks", "yields", "tasks_per_s",
	"all_p99_us", "high_p99_us", "normal_p50_us", "normal_p99_us", "normal_max_us", "high_p50_us", "high_max_us",
	"jain", "worst_session_max_wait_us", "yields_per_s",
	"objective", "p99_vs_default", "throughput_vs_default", "high_p99_vs_default", "verdict"}

// writeCSV writes one record per threshold and round (rounds numbered
// from 1), thresholds in the order of the sweep, durations in
// microseconds, so that the file loads as numbers and the rule can be
// applied to it again. offered is the load as a multiple of the measured
// capacity (0: not known). The last columns repeat, on each of a
// threshold's records, what the table says of it: the same words.
func writeCSV(w io.Writer, results []result, j judgement, offered float64) error {
	cw := csv.NewWriter(w)
	us := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) }
	load := ""
	if offered > 0 {
		load = strconv.FormatFloat(offered, 'f', 2, 64)
	}
	_ = cw.Write(csvHeader)
	for _, res := range results {
		vs := make([]string, numFigures)
		for _, f := range j.figures() {
			vs[f] = j.cell(res.Threshold, f)
		}
		for i, r := range res.Rounds {
			_ = cw.Write([]string{strconv.Itoa(r.Threshold), strconv.Itoa(i + 1), load,
				strconv.Itoa(r.Tasks), strconv.Itoa(r.HighTasks), strconv.FormatUint(r.Yields, 10),
				strconv.FormatFloat(r.Throughput, 'f', 0, 64),
				us(
					r.AllP99,
				), us(r.HighP99), us(r.NormalP50), us(r.NormalP99), us(r.NormalMax), us(r.HighP50), us(r.HighMax),
				strconv.FormatFloat(r.Jain, 'f', 4, 64), us(r.WorstSessionMaxWait),
				strconv.FormatFloat(r.YieldsPerSec, 'f', 0, 64),
				j.Objective.flag(), vs[figP99], vs[figThroughput], vs[figHighP99], j.verdictCell(res.Threshold)})
		}
	}
	cw.Flush()
	return cw.Error()
}
