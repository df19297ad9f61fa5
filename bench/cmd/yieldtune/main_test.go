package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/bench"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestSummarizeComputesPercentilesFairnessAndRates(t *testing.T) {
	ms := time.Millisecond
	r := raw{
		threshold: 20,
		elapsed:   2 * time.Second,
		samples: []sample{
			{session: 0, wait: 1 * ms}, {session: 0, wait: 2 * ms}, {session: 0, wait: 3 * ms},
			{session: 0, wait: 4 * ms}, {session: 1, high: true, wait: 10 * ms}, {session: 1, high: true, wait: 20 * ms},
		},
		finished: []time.Duration{time.Second, 2 * time.Second},
		done:     []int{4, 2},
		yields:   50,
	}
	got := summarize(r)
	assert.Equal(t, 20, got.Threshold)
	assert.InDelta(t, 3.0, got.Throughput, 1e-9, "6 tasks in 2 s")
	assert.InDelta(t, 25.0, got.YieldsPerSec, 1e-9)
	assert.Equal(t, 2*ms, got.NormalP50, "nearest rank of 1,2,3,4 ms")
	assert.Equal(t, 4*ms, got.NormalP99)
	assert.Equal(t, 4*ms, got.NormalMax)
	assert.Equal(t, 10*ms, got.HighP50)
	assert.Equal(t, 20*ms, got.HighP99)
	assert.Equal(t, 20*ms, got.HighMax)
	assert.Equal(t, 20*ms, got.AllP99)
	assert.Equal(t, 20*ms, got.WorstSessionMaxWait, "session 1's max wait")
	// Session throughputs 4/s and 1/s: 5² / (2·(16+1)) = 25/34.
	assert.InDelta(t, 25.0/34, got.Jain, 1e-9)
	assert.Equal(t, 2, got.HighTasks)
	assert.Equal(t, 4, got.NormalTask)
}

func TestJainIsOneForEqualAndOneOverNForMonopoly(t *testing.T) {
	assert.InDelta(t, 1.0, bench.Jain([]float64{5, 5, 5, 5}), 1e-12)
	assert.InDelta(t, 0.25, bench.Jain([]float64{8, 0, 0, 0}), 1e-12)
	assert.Equal(t, 0.0, bench.Jain(nil))
}

func TestRecommendTakesLowestP99WithinFivePercentOfBestThroughput(t *testing.T) {
	ms := time.Millisecond
	rows := []row{
		{Threshold: 10, Throughput: 90, AllP99: 1 * ms, YieldsPerSec: 9},  // lowest p99 but 10% slower: excluded
		{Threshold: 20, Throughput: 96, AllP99: 5 * ms, YieldsPerSec: 5},  // within 5%: candidate
		{Threshold: 30, Throughput: 100, AllP99: 8 * ms, YieldsPerSec: 3}, // the best throughput
		{Threshold: 40, Throughput: 97, AllP99: 4 * ms, YieldsPerSec: 2},  // within 5% and lowest p99 of those: chosen
	}
	got, why := recommend(rows)
	assert.Equal(t, 40, got.Threshold)
	assert.Contains(t, why, "WithYieldAfter(40)")
	assert.Contains(t, why, "within 5% of the best throughput (100 tasks/s at 30)")
	assert.NotContains(t, why, "\n")
}

// The rule compares the p99 wait over all tasks: the table must show that
// figure, so that the recommendation's number can be found in it.
func TestTableShowsTheP99TheRecommendationCompares(t *testing.T) {
	ms := time.Millisecond
	rows := []row{
		{Threshold: 10, Throughput: 100, AllP99: 7 * ms, NormalP99: 9 * ms, HighP99: 2 * ms, YieldsPerSec: 9},
		{Threshold: 20, Throughput: 99, AllP99: 3 * ms, NormalP99: 4 * ms, HighP99: time.Millisecond, YieldsPerSec: 5},
	}
	var out bytes.Buffer
	require.NoError(t, writeTable(&out, rows))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, "header and two rows:\n%s", out.String())
	assert.Contains(t, lines[0], "all p99")
	assert.Equal(t, []string{"20", "99", "3ms"}, strings.Fields(lines[2])[:3], "threshold, tasks/s, all p99")

	got, why := recommend(rows)
	assert.Equal(t, 20, got.Threshold)
	assert.Contains(t, why, "lowest p99 wait over all tasks (3ms)")
}

func TestRecommendBreaksTiesTowardTheLowerThreshold(t *testing.T) {
	for _, order := range [][]int{{30, 20}, {20, 30}} {
		var rows []row
		for _, th := range order {
			rows = append(rows, row{Threshold: th, Throughput: 100, AllP99: time.Millisecond, YieldsPerSec: 1})
		}
		got, why := recommend(rows)
		assert.Equal(t, 20, got.Threshold, "rows %v", order)
		// The best throughput is tied too: the lower threshold has it.
		assert.True(t, strings.HasPrefix(why, "WithYieldAfter(20): best throughput (100 tasks/s)"), why)
	}
}

// "Within 5%" includes a threshold exactly 5% below the best.
func TestRecommendCountsExactlyFivePercentBelowAsWithin(t *testing.T) {
	rows := []row{
		{Threshold: 10, Throughput: 95, AllP99: time.Millisecond, YieldsPerSec: 1},
		{Threshold: 20, Throughput: 100, AllP99: 2 * time.Millisecond, YieldsPerSec: 1},
	}
	got, _ := recommend(rows)
	assert.Equal(t, 10, got.Threshold)
}

// Durations are shown to the millisecond from a second up, to 10µs from a
// millisecond up, and to 100ns below.
func TestRoundPrecisionFollowsTheScale(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		1234567 * time.Microsecond: 1235 * time.Millisecond,
		time.Second:                time.Second,
		1234567 * time.Nanosecond:  1230 * time.Microsecond,
		time.Millisecond:           time.Millisecond,
		1234 * time.Nanosecond:     1200 * time.Nanosecond,
		999 * time.Microsecond:     999 * time.Microsecond,
	} {
		assert.Equal(t, want, round(d), "round(%v)", d)
	}
}

func TestCSVHasDurationsInMicroseconds(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, writeCSV(&out, []row{{Threshold: 10, Throughput: 1000, NormalP50: 1500 * time.Nanosecond,
		AllP99: 2 * time.Millisecond, Jain: 0.5, YieldsPerSec: 3}}))
	recs, err := csv.NewReader(&out).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 2)
	got := map[string]string{}
	for i, name := range recs[0] {
		got[name] = recs[1][i]
	}
	assert.Equal(t, "10", got["yield_after"])
	assert.Equal(t, "1000", got["tasks_per_s"])
	assert.Equal(t, "1.5", got["normal_p50_us"])
	assert.Equal(t, "2000.0", got["all_p99_us"])
}

func TestRecommendSaysWhenBestThroughputAlsoHasBestLatency(t *testing.T) {
	rows := []row{
		{Threshold: 10, Throughput: 50, AllP99: time.Second, YieldsPerSec: 1},
		{Threshold: 20, Throughput: 100, AllP99: time.Millisecond, YieldsPerSec: 1},
	}
	got, why := recommend(rows)
	assert.Equal(t, 20, got.Threshold)
	assert.Equal(t, "WithYieldAfter(20): best throughput (100 tasks/s) and the lowest p99 wait over all tasks (1ms) of the thresholds within 5% of it", why)
}

// A sweep in which no session ever yielded measured nothing the threshold
// does: the recommendation must say so instead of picking by noise.
func TestRecommendSaysTheThresholdDoesNotMatterWhenNoSessionYielded(t *testing.T) {
	rows := []row{
		{Threshold: 10, Throughput: 100, AllP99: 3 * time.Millisecond},
		{Threshold: 30, Throughput: 100, AllP99: 1 * time.Millisecond},
	}
	_, why := recommend(rows)
	assert.True(t, strings.HasPrefix(why, "none: no session yielded at any threshold"), why)
	assert.Contains(t, why, "keep the default (10)")
	assert.NotContains(t, why, "WithYieldAfter(30)")
	assert.NotContains(t, why, "\n")

	rows[1].YieldsPerSec = 0.5 // one threshold yielded: the rule applies
	_, why = recommend(rows)
	assert.True(t, strings.HasPrefix(why, "WithYieldAfter(30)"), why)
}

func TestBadFlagsGiveOneLineErrorAndExitCode2(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"unknown flag":            {[]string{"-nope"}, "flag provided but not defined: -nope"},
		"not a number":            {[]string{"-sessions", "many"}, `invalid value "many" for flag -sessions`},
		"zero sessions":           {[]string{"-sessions", "0"}, "-sessions 0: must be at least 1"},
		"zero tasks":              {[]string{"-tasks", "0"}, "-tasks 0: must be at least 1"},
		"negative work":           {[]string{"-work", "-1ms"}, "-work -1ms: must not be negative"},
		"negative sleep":          {[]string{"-sleep", "-1ms"}, "-sleep -1ms: must not be negative"},
		"high above one":          {[]string{"-high", "1.5"}, "-high 1.5: must be between 0 and 1"},
		"negative conc":           {[]string{"-max-concurrency", "-1"}, "-max-concurrency -1: must be >= 0"},
		"no producers":            {[]string{"-producers", "0"}, "-producers 0: must be 1..10000"},
		"too many producers":      {[]string{"-producers", "10001"}, "-producers 10001: must be 1..10000"},
		"high not a number":       {[]string{"-high", "NaN"}, "-high NaN: must be between 0 and 1"},
		"too many tasks":          {[]string{"-sessions", "1000", "-tasks", "10001"}, "-sessions 1000 × -tasks 10001: more than 10000000 tasks per threshold"},
		"tasks overflow int":      {[]string{"-sessions", "3000000000", "-tasks", "4000000000"}, "-sessions 3000000000 × -tasks 4000000000: more than 10000000 tasks"},
		"duration over a day":     {[]string{"-duration", "25h"}, "-duration 25h0m0s: must be at most 24h0m0s"},
		"load spreads over a day": {[]string{"-load", "1e-300"}, "-load 1e-300: spreads each threshold's tasks over"},
		"load spreads over two days": {[]string{"-sessions", "1", "-tasks", "86400", "-work", "0", "-sleep", "1s", "-max-concurrency", "1", "-load", "0.5"},
			"-load 0.5: spreads each threshold's tasks over 48h, more than 24h0m0s"},
		"zero duration":     {[]string{"-duration", "0s"}, "-duration 0s: must be positive"},
		"zero load":         {[]string{"-load", "0"}, "-load 0: must be a positive number"},
		"load not finite":   {[]string{"-load", "Inf"}, "-load +Inf: must be a positive number"},
		"load and duration": {[]string{"-load", "2", "-duration", "1s"}, "-load and -duration: give one or the other"},
		"from below range":  {[]string{"-from", "5"}, "-from 5: must be 10..50"},
		"to above range":    {[]string{"-to", "60"}, "-to 60: must be -from..50"},
		"to below from":     {[]string{"-from", "30", "-to", "20"}, "-to 20: must be -from..50"},
		"zero step":         {[]string{"-step", "0"}, "-step 0: must be at least 1"},
		"stray argument":    {[]string{"extra"}, `unexpected argument "extra"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stdout, &stderr)
			assert.Equal(t, 2, code)
			assert.Empty(t, stdout.String())
			msg := stderr.String()
			assert.Equal(t, 1, strings.Count(msg, "\n"), "one line: %q", msg)
			assert.True(t, strings.HasPrefix(msg, "yieldtune: "), msg)
			assert.Contains(t, msg, tc.want)
		})
	}
}

// Each limit is inclusive: the value at it is accepted (parsed only, not
// run), and the next one out is refused by the cases above.
func TestFlagsAtTheirLimitsAreAccepted(t *testing.T) {
	cases := map[string][]string{
		"one session, one task": {"-sessions", "1", "-tasks", "1", "-producers", "1"},
		"the most tasks":        {"-sessions", "1000", "-tasks", "10000"},
		"the most producers":    {"-producers", "10000"},
		"no High, no limit":     {"-high", "0", "-max-concurrency", "0"},
		"all High":              {"-high", "1"},
		"a day's duration":      {"-duration", "24h"},
		"a single threshold":    {"-from", "50", "-to", "50", "-step", "1"},
		// One slot held 1 s a task: 86,400 tasks at 1× take a day exactly.
		"a load that takes a day": {"-sessions", "1", "-tasks", "86400", "-work", "0", "-sleep", "1s", "-max-concurrency", "1", "-load", "1"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := parseFlags(args, &bytes.Buffer{})
			assert.NoError(t, err)
		})
	}
	c, err := parseFlags(cases["a load that takes a day"], &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 24*time.Hour, c.duration)
}

func TestHelpExitsZero(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, run(context.Background(), []string{"-h"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "-sessions")
}

func TestQuickChangesOnlyDefaults(t *testing.T) {
	c, err := parseFlags([]string{"-quick", "-tasks", "7"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 7, c.tasks, "an explicit flag wins over -quick")
	assert.True(t, c.paced)
	assert.Equal(t, c.spread(), c.duration, "paced by -load over the smaller load")
	assert.Equal(t, []int{10, 30, 50}, c.thresholds())
}

func TestDurationIsGivenOrComesFromLoad(t *testing.T) {
	c, err := parseFlags([]string{"-duration", "3s"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, c.duration)
	assert.False(t, c.paced)

	c, err = parseFlags([]string{"-load", "2"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.True(t, c.paced)
	assert.Equal(t, c.spread(), c.duration)
}

// spread paces submissions so that the offered work is -load times what
// the slots can run.
func TestSpreadOffersLoadTimesWhatTheSlotsRun(t *testing.T) {
	ms, us := time.Millisecond, time.Microsecond
	cpus := runtime.GOMAXPROCS(0)
	cases := map[string]struct {
		c    config
		want time.Duration
	}{
		// 4 slots held 10 ms each run 400 tasks/s; 1,000 tasks at twice that: 1.25 s.
		"sleeping tasks, limit": {config{sessions: 100, tasks: 10, sleep: 10 * ms, maxConc: 4, load: 2}, 1250 * ms},
		// No limit: each of 10 sessions is a slot, 100 tasks/s each; 1,000 tasks at 1×: 1 s.
		"sleeping tasks, no limit": {config{sessions: 10, tasks: 100, sleep: 10 * ms, load: 1}, time.Second},
		// One slot, 1 ms each: 1,000 tasks/s whatever the CPUs; 500 tasks at 0.5×: 1 s.
		"work, one slot": {config{sessions: 5, tasks: 100, work: ms, maxConc: 1, load: 0.5}, time.Second},
		// No limit and more sessions than CPUs: the CPUs bound the work.
		"work, CPU-bound": {config{sessions: 1000, tasks: 1, work: 100 * us, load: 1},
			time.Duration(1000 * 100 * float64(us) / float64(cpus))},
		"no time": {config{sessions: 10, tasks: 10, maxConc: 2, load: 1.25}, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			assert.InDelta(t, float64(tc.want), float64(tc.c.spread()), float64(time.Microsecond))
		})
	}
}

// The default load (here its -quick size) must make sessions compete for
// slots: if no session ever yields, the sweep measures nothing the
// threshold does.
func TestDefaultLoadMakesSessionsYield(t *testing.T) {
	c, err := parseFlags([]string{"-quick"}, &bytes.Buffer{})
	require.NoError(t, err)
	r, err := runOne(context.Background(), c, seqsched.MinYieldAfter, c.spinIters(), func(int) {})
	require.NoError(t, err)
	assert.Positive(t, r.yields, "no session yielded under the default load")
}

func TestDefaultsAreTheDocumentedOnes(t *testing.T) {
	c, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, config{sessions: 100, tasks: 500, work: 50 * time.Microsecond, high: 0.1,
		maxConc: runtime.GOMAXPROCS(0), producers: 2, duration: c.spread(), load: 1.25, paced: true,
		from: seqsched.MinYieldAfter, to: seqsched.MaxYieldAfter, step: 10}, c)
}

func TestWorkIsSpunAndNoWorkIsNone(t *testing.T) {
	assert.Zero(t, config{}.spinIters())
	c := config{work: 50 * time.Microsecond}
	assert.Equal(t, bench.SpinIters(c.work), c.spinIters())
	assert.Positive(t, c.spinIters())
}

func TestThresholdsIncludeTheLast(t *testing.T) {
	c := config{from: 10, to: 45, step: 10}
	assert.Equal(t, []int{10, 20, 30, 40, 45}, c.thresholds())
}

// -high is a fraction of all tasks: every round(1/high)-th task is High,
// so it falls on every session in turn; 0 submits none, and so does a
// fraction too small for one High task among the run's (1/high used to
// overflow the int and made every task High).
func TestRunOneSubmitsTheHighFractionAsHigh(t *testing.T) {
	for _, tc := range []struct {
		high  float64
		every int // 0: none
	}{{0, 0}, {0.1, 10}, {0.25, 4}, {0.3, 3}, {1, 1}, {0.01, 100}, {1e-20, 0}} {
		c := config{sessions: 3, tasks: 40, producers: 2, high: tc.high}
		r, err := runOne(context.Background(), c, 10, 0, func(int) {})
		require.NoError(t, err)
		var highs []int
		for id, smp := range r.samples {
			require.Equal(t, id%c.sessions, smp.session, "task %d", id)
			if smp.high {
				highs = append(highs, id)
			}
		}
		var want []int
		for id := tc.every - 1; tc.every > 0 && id < c.sessions*c.tasks; id += tc.every {
			want = append(want, id)
		}
		require.Equal(t, want, highs, "high %v", tc.high)
		require.Equal(t, []int{40, 40, 40}, r.done)
	}
}

// On the bubble's clock: one session, three tasks that only sleep, all
// submitted at once. Each waits for the sleeps before it.
func TestRunOneTasksSleepForSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := config{sessions: 1, tasks: 3, producers: 1, sleep: 10 * time.Millisecond}
		r, err := runOne(context.Background(), c, 10, 0, func(int) {})
		require.NoError(t, err)
		assert.Equal(t, 30*time.Millisecond, r.elapsed)
		var waits []time.Duration
		for _, smp := range r.samples {
			waits = append(waits, smp.wait)
		}
		assert.Equal(t, []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond}, waits)
	})
}

// With -duration, submissions are spread evenly over it: task id is
// submitted at id × duration/total (on the bubble's clock, tasks of no
// work start as they are submitted).
func TestRunOnePacesSubmissionsOverDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := config{sessions: 2, tasks: 5, producers: 2, duration: 100 * time.Millisecond}
		r, err := runOne(context.Background(), c, 10, 0, func(int) {})
		require.NoError(t, err)
		assert.Equal(t, 90*time.Millisecond, r.elapsed, "the last of 10 tasks is submitted at 9 × 10ms")
		assert.Equal(t, []time.Duration{80 * time.Millisecond, 90 * time.Millisecond}, r.finished, "session i takes tasks i, i+2, ...")
	})
}

func TestRunPrintsTableRecommendationCSVAndSVG(t *testing.T) {
	dir := t.TempDir()
	csvPath, svgPath := filepath.Join(dir, "rows.csv"), filepath.Join(dir, "chart.svg")
	var stdout, stderr bytes.Buffer
	args := []string{"-sessions", "4", "-tasks", "25", "-work", "0", "-duration", "20ms",
		"-from", "10", "-to", "20", "-step", "10", "-no-progress", "-csv", csvPath, "-svg", svgPath}
	require.Equal(t, 0, run(context.Background(), args, &stdout, &stderr), stderr.String())

	out := stdout.String()
	procs := runtime.GOMAXPROCS(0)
	assert.Contains(t, out, fmt.Sprintf("load: 4 sessions × 25 tasks, work 0s, sleep 0s, High 10%%, max concurrency %d, 2 producers, over 20ms\n", procs))
	assert.Regexp(t, `\nrecommendation: (WithYieldAfter\(\d+\)|none): [^\n]+\n$`, out) // either form: this load is too small to say whether it yields
	lines := strings.Split(out, "\n")
	var table []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) == len(header) && (f[0] == "10" || f[0] == "20") {
			table = append(table, f[0])
		}
	}
	assert.Equal(t, []string{"10", "20"}, table, "one row per threshold:\n%s", out)

	f, err := os.Open(csvPath)
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 3, "header and two rows")
	assert.Equal(t, "yield_after", recs[0][0])
	assert.Equal(t, []string{"10", "20"}, []string{recs[1][0], recs[2][0]})

	svg, err := os.ReadFile(svgPath)
	require.NoError(t, err)
	assert.Contains(t, string(svg), "<svg")
	assert.Contains(t, string(svg), fmt.Sprintf(">yieldtune: 4 sessions, work 0s, High 10%%, max concurrency %d<", procs))
}

// A chart that cannot be written fails the run (exit code 1) with the
// file's error; so does a CSV file.
func TestRunFailsWhenAnOutputCannotBeWritten(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	for _, flag := range []string{"-svg", "-csv"} {
		t.Run(flag, func(t *testing.T) {
			path := filepath.Join(missing, "out")
			var stdout, stderr bytes.Buffer
			args := []string{"-sessions", "1", "-tasks", "1", "-work", "0", "-duration", "1ms",
				"-from", "10", "-to", "10", "-no-progress", flag, path}
			assert.Equal(t, 1, run(context.Background(), args, &stdout, &stderr))
			assert.Equal(t, "yieldtune: open "+path+": no such file or directory\n", stderr.String())
		})
	}
}

// The progress bar on stderr counts every threshold's tasks in one bar and
// is cleared at the end. On the bubble's clock: 2 tasks of 200 ms per
// threshold, so the bar (redrawn at most every 100 ms) shows each task.
func TestProgressBarCountsTheWholeSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		args := []string{"-sessions", "1", "-tasks", "2", "-work", "0", "-sleep", "200ms", "-duration", "1ms",
			"-from", "10", "-to", "20", "-step", "10"}
		require.Equal(t, 0, run(context.Background(), args, &stdout, &stderr), stderr.String())
		var shown []string
		for _, m := range regexp.MustCompile(`(WithYieldAfter\(\d+\)) +(\d+%) \|`).FindAllStringSubmatch(stderr.String(), -1) {
			shown = append(shown, m[1]+" "+m[2])
		}
		assert.Equal(t, []string{"WithYieldAfter(10) 0%", "WithYieldAfter(10) 25%", "WithYieldAfter(10) 50%", "WithYieldAfter(20) 75%"}, shown)
		assert.Regexp(t, `\r +\r$`, stderr.String(), "cleared at the end")
	})
}

func TestDescribeSaysHowTheLoadIsPaced(t *testing.T) {
	c := config{sessions: 4, tasks: 25, work: 50 * time.Microsecond, high: 0.25, maxConc: 2, producers: 3}
	paced, fixed, asFast := c, c, c
	paced.duration, paced.load, paced.paced = 1500*time.Millisecond, 1.25, true
	fixed.duration = 20 * time.Millisecond
	asFast.work, asFast.paced = 0, true
	const load = "4 sessions × 25 tasks, work 50µs, sleep 0s, High 25%, max concurrency 2, 3 producers, "
	assert.Equal(t, load+"over 1.5s (offered 1.25× what the slots run)", describe(paced))
	assert.Equal(t, load+"over 20ms", describe(fixed))
	assert.Equal(t, strings.Replace(load, "50µs", "0s", 1)+"as fast as the producers submit (tasks take no time)", describe(asFast))
}

// The chart is a 7-inch square, and its wait axis is in milliseconds: p99
// waits of 12 and 20 ms get ticks 0, 10 and 20.
func TestSVGIsASevenInchSquareWithWaitsInMilliseconds(t *testing.T) {
	rows := []row{
		{Threshold: 10, Throughput: 1000, AllP99: 20 * time.Millisecond, NormalP99: 20 * time.Millisecond, HighP99: 5 * time.Millisecond},
		{Threshold: 20, Throughput: 1200, AllP99: 12 * time.Millisecond, NormalP99: 12 * time.Millisecond, HighP99: 3 * time.Millisecond},
	}
	var b bytes.Buffer
	require.NoError(t, writeSVG(&b, rows, "title"))
	svg := b.String()
	assert.Contains(t, svg, `<svg width="504pt" height="504pt"`)
	var texts []string
	for _, m := range regexp.MustCompile(`>([^<>]+)</text>`).FindAllStringSubmatch(svg, -1) {
		texts = append(texts, m[1])
	}
	i := slices.Index(texts, "p99 wait (ms)")
	j := slices.Index(texts, "all tasks")
	require.True(t, i >= 0 && j > i, "axis label and legend in %q", texts)
	assert.Equal(t, []string{"0", "10", "20"}, texts[i+1:j], "the wait axis' ticks")
}
