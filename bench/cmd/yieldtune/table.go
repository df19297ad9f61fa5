package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/seqsched/seqsched"
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

// throughputSlack is how far below the best throughput a threshold may be
// and still be recommended for its latency.
const throughputSlack = 0.05

// recommend applies the rule: among the thresholds whose throughput is
// within 5% of the best, take the one with the lowest p99 wait over all
// tasks (ties: the lower threshold). It returns the chosen row and a
// one-line explanation, which says instead that the threshold does not
// matter when no session yielded at any threshold. The best throughput,
// too, goes to the lower threshold on a tie.
func recommend(rows []row) (row, string) {
	if len(rows) == 0 {
		return row{}, "no thresholds measured"
	}
	best := rows[0]
	for _, r := range rows[1:] {
		if r.Throughput > best.Throughput || (r.Throughput == best.Throughput && r.Threshold < best.Threshold) {
			best = r
		}
	}
	floor := best.Throughput * (1 - throughputSlack)
	var pick row
	found := false
	for _, r := range rows {
		if r.Throughput < floor {
			continue
		}
		if !found || r.AllP99 < pick.AllP99 || (r.AllP99 == pick.AllP99 && r.Threshold < pick.Threshold) {
			pick, found = r, true
		}
	}
	why := fmt.Sprintf("WithYieldAfter(%d): lowest p99 wait over all tasks (%s) among the thresholds within %.0f%% of the best throughput (%.0f tasks/s at %d)",
		pick.Threshold, round(pick.AllP99), throughputSlack*100, best.Throughput, best.Threshold)
	if pick.Threshold == best.Threshold {
		why = fmt.Sprintf("WithYieldAfter(%d): best throughput (%.0f tasks/s) and the lowest p99 wait over all tasks (%s) of the thresholds within %.0f%% of it",
			pick.Threshold, best.Throughput, round(pick.AllP99), throughputSlack*100)
	}
	if !slices.ContainsFunc(rows, func(r row) bool { return r.YieldsPerSec > 0 }) {
		why = fmt.Sprintf("none: no session yielded at any threshold, so WithYieldAfter makes no difference to this load and the rows differ by noise; keep the default (%d), or offer more work (-load) to see where it matters",
			seqsched.DefaultYieldAfter)
	}
	return pick, why
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

var header = []string{"yield", "tasks/s", "all p99", "normal p50", "normal p99", "normal max",
	"high p50", "high p99", "high max", "jain", "worst sess max", "yields/s"}

func (r row) cells() []string {
	return []string{
		strconv.Itoa(r.Threshold), fmt.Sprintf("%.0f", r.Throughput), round(r.AllP99).String(),
		round(r.NormalP50).String(), round(r.NormalP99).String(), round(r.NormalMax).String(),
		round(r.HighP50).String(), round(r.HighP99).String(), round(r.HighMax).String(),
		fmt.Sprintf("%.3f", r.Jain), round(r.WorstSessionMaxWait).String(), fmt.Sprintf("%.0f", r.YieldsPerSec),
	}
}

// writeTable prints rows aligned, one per threshold.
func writeTable(w io.Writer, rows []row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	line := func(cells []string) {
		for _, c := range cells {
			fmt.Fprint(tw, c, "\t")
		}
		fmt.Fprintln(tw)
	}
	line(header)
	for _, r := range rows {
		line(r.cells())
	}
	return tw.Flush()
}

// writeCSV writes rows with durations in microseconds, so that the file
// loads as numbers.
func writeCSV(w io.Writer, rows []row) error {
	cw := csv.NewWriter(w)
	us := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) }
	_ = cw.Write([]string{"yield_after", "tasks_per_s", "normal_p50_us", "normal_p99_us", "normal_max_us",
		"high_p50_us", "high_p99_us", "high_max_us", "all_p99_us", "jain", "worst_session_max_wait_us", "yields_per_s"})
	for _, r := range rows {
		_ = cw.Write([]string{strconv.Itoa(r.Threshold), strconv.FormatFloat(r.Throughput, 'f', 0, 64),
			us(r.NormalP50), us(r.NormalP99), us(r.NormalMax), us(r.HighP50), us(r.HighP99), us(r.HighMax),
			us(r.AllP99), strconv.FormatFloat(r.Jain, 'f', 4, 64), us(r.WorstSessionMaxWait),
			strconv.FormatFloat(r.YieldsPerSec, 'f', 0, 64)})
	}
	cw.Flush()
	return cw.Error()
}
