package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The text, the table, the CSV and the chart say the same thing with the
// same words, thresholds in the same order: each threshold's words on
// each figure and its verdict, all relations to the default; the chart's
// title is the recommendation. Checked on a sweep with a recommendation,
// one with a trade-off, one without, and one the rule did not judge.
func TestTextTableCSVAndChartSayTheSame(t *testing.T) {
	recommend := []result{
		withHigh(
			synthResult(10, []float64{100, 101, 99}, []time.Duration{10 * ms, 11 * ms, 12 * ms}),
			5*ms,
			6*ms,
			7*ms,
		),
		withHigh(synthResult(30, []float64{100, 102, 98}, []time.Duration{6 * ms, 7 * ms, 8 * ms}), 5*ms, 6*ms, 7*ms),
		withHigh(synthResult(50, []float64{90, 91, 89}, []time.Duration{4 * ms, 5 * ms, 6 * ms}), 5*ms, 6*ms, 7*ms),
	}
	for name, results := range map[string][]result{
		"recommendation":  recommend,
		"issue 30, run 1": readRecorded(t, "issue30-run1.csv"),
		"issue 30, run 2": readRecorded(t, "issue30-run2.csv"),
		"low load":        readRecorded(t, "low-load.csv"),
		"noise":           readRecorded(t, "noisy-30-looked-better.csv"),
		"quick":           readRecorded(t, "quick-busy-1.csv"),
	} {
		for _, obj := range []figure{figP99, figThroughput, figHighP99} {
			t.Run(name+", "+obj.flag(), func(t *testing.T) {
				j := judge(results, 10, obj)
				sayTheSame(t, results, j)
			})
		}
	}
	j := judge(recommend, 10, figP99)
	require.Equal(t, 30, j.Pick, "50 is a trade-off: slower")
	require.Equal(t, "trade-off", j.verdictCell(50))
}

// sayTheSame checks every output of one judgement against its words.
func sayTheSame(t *testing.T, results []result, j judgement) {
	t.Helper()
	ts := thresholdsOf(results)
	figs := j.figures()
	want := map[int][]string{} // per threshold: its words on each figure, then its verdict
	for _, th := range ts {
		for _, f := range figs {
			want[th] = append(want[th], j.cell(th, f))
		}
		want[th] = append(want[th], j.verdictCell(th))
	}

	// The text: the table's lines in order (two tables, one above the
	// other: a threshold's line is its line in each), each with the
	// threshold's words in order and its verdict last; the
	// recommendation; and why, naming each judged threshold with its
	// verdict, in order.
	var text bytes.Buffer
	require.NoError(t, report(&text, results, j, ""))
	out := text.String()
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && slices.Contains(ts, atoi(f[0])) {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 2*len(ts), out)
	for i, th := range ts {
		second := lines[len(ts)+i]
		assert.True(
			t,
			strings.HasPrefix(strings.TrimSpace(second), fmt.Sprint(th)+" "),
			"line %d of the second table is %d's: %q",
			i,
			th,
			second,
		)
		l := lines[i] + "  " + strings.TrimSpace(second)
		assert.True(t, strings.HasPrefix(strings.TrimSpace(l), fmt.Sprint(th)+" "), "line %d is %d's: %q", i, th, l)
		assert.True(t, strings.HasSuffix(l, " "+want[th][len(want[th])-1]), "%d's verdict ends its line: %q", th, l)
		at := 0
		for _, w := range want[th][:len(figs)] {
			k := strings.Index(l[at:], " "+w+" ")
			require.GreaterOrEqual(t, k, 0, "%q in order in %q", w, l)
			at += k + len(w)
		}
	}
	assert.Contains(t, out, "\nrecommendation: "+j.Answer+"\nwhy: "+j.Why+"\n")
	if j.Applies {
		at := 0
		for _, th := range ts[1:] {
			k := strings.Index(j.Why[at:], fmt.Sprintf("; %d %s: ", th, j.verdictCell(th)))
			require.GreaterOrEqual(t, k, 0, "%d's verdict, in order, in %q", th, j.Why)
			at += k + 1
		}
	}

	// The CSV: each record carries its threshold's words and verdict.
	var b bytes.Buffer
	require.NoError(t, writeCSV(&b, results, j, 1.5))
	recs, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	col := func(name string) int { return slices.Index(csvHeader, name) }
	figCol := [numFigures]int{col("p99_vs_default"), col("throughput_vs_default"), col("high_p99_vs_default")}
	var order []int
	for _, rec := range recs[1:] {
		th := atoi(rec[0])
		if !slices.Contains(order, th) {
			order = append(order, th)
		}
		var got []string
		for _, f := range figs {
			got = append(got, rec[figCol[f]])
		}
		got = append(got, rec[col("verdict")])
		assert.Equal(t, want[th], got, "CSV record %v", rec)
		assert.Equal(t, j.Objective.flag(), rec[col("objective")])
	}
	assert.Equal(t, ts, order, "the CSV's thresholds in the sweep's order")

	// The chart: the title is the recommendation, the bottom chart's axis
	// gives each threshold's verdict, and each figure's chart labels the
	// thresholds, in order, with the same words.
	b.Reset()
	require.NoError(t, writeChart(&b, "svg", results, j, "title"))
	texts := svgTexts(b.String())
	assert.Equal(t, []string{"title", j.Answer}, texts[:2])
	var ticks []string
	for _, th := range ts {
		tick := fmt.Sprint(th)
		if th == j.Default {
			tick += "*"
		}
		ticks = append(ticks, tick, j.verdictCell(th))
	}
	assert.NotEqual(t, -1, indexRun(texts, ticks), "the thresholds and their verdicts %q in %q", ticks, texts)
	at := 0
	for _, f := range figs {
		for _, th := range ts {
			k := slices.Index(texts[at:], j.cell(th, f))
			require.GreaterOrEqual(t, k, 0, "%d on %s: %q, in order, in %q", th, f, j.cell(th, f), texts)
			at += k + 1
		}
	}

	// No threshold is compared with anything but the default.
	for _, s := range []string{out, strings.Join(texts, "\n")} {
		assert.NotContains(t, s, "indistinguishable")
	}
}

// indexRun is where run occurs in xs as consecutive elements, or -1.
func indexRun(xs, run []string) int {
	for i := 0; i+len(run) <= len(xs); i++ {
		if slices.Equal(xs[i:i+len(run)], run) {
			return i
		}
	}
	return -1
}

func atoi(s string) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		return -1
	}
	return n
}

// What writeCSV writes, readRecorded reads back: the rule gives the same
// answer on the file as on the sweep.
func TestRecordedSweepReadsBackAsItWasJudged(t *testing.T) {
	results := readRecorded(t, "issue30-run1.csv")
	j := judge(results, 10, figP99)
	dir := t.TempDir()
	require.NoError(
		t,
		writeFile(filepath.Join(dir, "again.csv"), func(w io.Writer) error { return writeCSV(w, results, j, 1.5) }),
	)
	again := readRecordedPath(t, filepath.Join(dir, "again.csv"))
	assert.Equal(t, results, again)
	assert.Equal(t, j, judge(again, 10, figP99))
	assert.Equal(t, []string{"1.50"}, slices.Compact(recordedColumn(t, filepath.Join(dir, "again.csv"), "offered")))
	assert.Regexp(t, regexp.MustCompile(`^p99$`), recordedColumn(t, filepath.Join(dir, "again.csv"), "objective")[0])
}
