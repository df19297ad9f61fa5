package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

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
			{
				session: 0,
				wait:    4 * ms,
			}, {session: 1, high: true, wait: 10 * ms}, {session: 1, high: true, wait: 20 * ms},
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
	assert.Equal(t, 6, got.Tasks)
	assert.Equal(t, uint64(50), got.Yields)
}

func TestJainIsOneForEqualAndOneOverNForMonopoly(t *testing.T) {
	assert.InDelta(t, 1.0, bench.Jain([]float64{5, 5, 5, 5}), 1e-12)
	assert.InDelta(t, 0.25, bench.Jain([]float64{8, 0, 0, 0}), 1e-12)
	assert.Equal(t, 0.0, bench.Jain(nil))
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

func TestBadFlagsGiveOneLineErrorAndExitCode2(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"unknown flag":       {[]string{"-nope"}, "flag provided but not defined: -nope"},
		"not a number":       {[]string{"-sessions", "many"}, `invalid value "many" for flag -sessions`},
		"zero sessions":      {[]string{"-sessions", "0"}, "-sessions 0: must be at least 1"},
		"zero tasks":         {[]string{"-tasks", "0"}, "-tasks 0: must be at least 1"},
		"negative work":      {[]string{"-work", "-1ms"}, "-work -1ms: must not be negative"},
		"negative sleep":     {[]string{"-sleep", "-1ms"}, "-sleep -1ms: must not be negative"},
		"high above one":     {[]string{"-high", "1.5"}, "-high 1.5: must be between 0 and 1"},
		"negative conc":      {[]string{"-max-concurrency", "-1"}, "-max-concurrency -1: must be >= 0"},
		"no producers":       {[]string{"-producers", "0"}, "-producers 0: must be 1..10000"},
		"too many producers": {[]string{"-producers", "10001"}, "-producers 10001: must be 1..10000"},
		"high not a number":  {[]string{"-high", "NaN"}, "-high NaN: must be between 0 and 1"},
		"too many tasks": {
			[]string{"-sessions", "1000", "-tasks", "10001"},
			"-sessions 1000 × -tasks 10001: more than 10000000 tasks per threshold",
		},
		"tasks overflow int": {
			[]string{"-sessions", "3000000000", "-tasks", "4000000000"},
			"-sessions 3000000000 × -tasks 4000000000: more than 10000000 tasks",
		},
		"duration over a day":     {[]string{"-duration", "25h"}, "-duration 25h0m0s: must be at most 24h0m0s"},
		"load spreads over a day": {[]string{"-load", "1e-300"}, "-load 1e-300: spreads each threshold's tasks over"},
		"load spreads over two days": {
			[]string{
				"-sessions",
				"1",
				"-tasks",
				"86400",
				"-work",
				"0",
				"-sleep",
				"1s",
				"-max-concurrency",
				"1",
				"-load",
				"0.5",
			},
			"-load 0.5: spreads each threshold's tasks over 48h, more than 24h0m0s",
		},
		"zero duration":     {[]string{"-duration", "0s"}, "-duration 0s: must be positive"},
		"zero load":         {[]string{"-load", "0"}, "-load 0: must be a positive number"},
		"load not finite":   {[]string{"-load", "Inf"}, "-load +Inf: must be a positive number"},
		"load and duration": {[]string{"-load", "2", "-duration", "1s"}, "-load and -duration: give one or the other"},
		"from below range":  {[]string{"-from", "5"}, "-from 5: must be 10..50"},
		"to above range":    {[]string{"-to", "60"}, "-to 60: must be -from..50"},
		"to below from":     {[]string{"-from", "30", "-to", "20"}, "-to 20: must be -from..50"},
		"zero step":         {[]string{"-step", "0"}, "-step 0: must be at least 1"},
		"stray argument":    {[]string{"extra"}, `unexpected argument "extra"`},
		"two rounds":        {[]string{"-rounds", "2"}, "-rounds 2: must be 3..1000"},
		"too many rounds":   {[]string{"-rounds", "1001"}, "-rounds 1001: must be 3..1000"},
		"trace and sessions": {[]string{"-trace", "load.csv", "-sessions", "5"},
			"-sessions: does not apply to -trace, which replays the recorded load"},
		"trace and load": {[]string{"-load", "2", "-trace", "load.csv"}, "-load: does not apply to -trace"},
		"unknown objective": {
			[]string{"-objective", "latency"},
			`-objective "latency": must be p99, throughput or high-p99`,
		},
		"high-p99, no High": {
			[]string{"-objective", "high-p99", "-high", "0"},
			"-objective high-p99: the load has no High tasks (-high 0)",
		},
		"high-p99, too few": {
			[]string{"-objective", "high-p99", "-high", "1e-9"},
			"-objective high-p99: the load has no High tasks",
		},
		"negative raises": {[]string{"-raises", "-1"}, "-raises -1: must be 0..5"},
		"too many raises": {[]string{"-raises", "6"}, "-raises 6: must be 0..5"},
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
		"one session, one task":  {"-sessions", "1", "-tasks", "1", "-producers", "1"},
		"the most tasks":         {"-sessions", "1000", "-tasks", "10000"},
		"the most producers":     {"-producers", "10000"},
		"no High, no limit":      {"-high", "0", "-max-concurrency", "0"},
		"all High":               {"-high", "1"},
		"a day's duration":       {"-duration", "24h"},
		"a single threshold":     {"-from", "50", "-to", "50", "-step", "1"},
		"the fewest rounds":      {"-rounds", "3"},
		"the most rounds":        {"-rounds", "1000"},
		"no raise":               {"-raises", "0"},
		"the most raises":        {"-raises", "5"},
		"each objective":         {"-objective", "throughput"},
		"High wait, High tasks":  {"-objective", "high-p99", "-high", "0.01"},
		"a trace, its own flags": {"-trace", "load.csv", "-max-concurrency", "4", "-quick", "-rounds", "7"},
		// One slot held 1 s a task: 86,400 tasks at 1× take a day exactly.
		"a load that takes a day": {
			"-sessions",
			"1",
			"-tasks",
			"86400",
			"-work",
			"0",
			"-sleep",
			"1s",
			"-max-concurrency",
			"1",
			"-load",
			"1",
		},
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

// The default load's shape at the default -load makes sessions give way
// at the default often enough for the rule to apply. On the bubble's
// clock, with tasks that only sleep, what the slots run is exact, so this
// holds whatever else the machine runs; on a live machine the sweep checks
// it every round and raises the load when it does not (see
// TestSweepRaisesTheLoadUntilSessionsGiveWay).
func TestDefaultLoadShapeMakesSessionsGiveWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := parseFlags([]string{"-quick", "-work", "0", "-sleep", "1ms"}, &bytes.Buffer{})
		require.NoError(t, err)
		require.Equal(t, 1.5, c.load)
		ld, p, err := planLoad(context.Background(), c, nil)
		require.NoError(t, err)
		require.InDelta(t, 1.5, p.offered(), 0.01)
		r, err := runOne(context.Background(), ld, defaultThreshold, c.maxConc, func(int) {})
		require.NoError(t, err)
		got := yieldsPer100(summarize(r))
		assert.GreaterOrEqual(
			t,
			got,
			3*minYieldsPer100,
			"yields per 100 tasks at the default: well above the rule's bar",
		)
		t.Logf("%.2f yields per 100 tasks", got)
	})
}

func TestDefaultsAreTheDocumentedOnes(t *testing.T) {
	c, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, config{sessions: 100, tasks: 200, work: 50 * time.Microsecond, high: 0.1,
		maxConc: runtime.GOMAXPROCS(0), producers: 2, duration: c.spread(), load: 1.5, paced: true,
		from: seqsched.MinYieldAfter, to: seqsched.MaxYieldAfter, step: 10, rounds: 5, objective: figP99, raises: 2}, c)
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

// The rule compares every threshold with the default: a sweep that starts
// above it measures it too.
func TestThresholdsIncludeTheDefault(t *testing.T) {
	c := config{from: 30, to: 50, step: 20}
	assert.Equal(t, []int{seqsched.DefaultYieldAfter, 30, 50}, c.thresholds())
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
		r, err := runOne(context.Background(), synthetic(c, 0, 0), 10, 0, func(int) {})
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
		r, err := runOne(context.Background(), synthetic(c, 0, 0), 10, 0, func(int) {})
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
		c := config{sessions: 2, tasks: 5, producers: 2}
		r, err := runOne(context.Background(), synthetic(c, 0, 100*time.Millisecond), 10, 0, func(int) {})
		require.NoError(t, err)
		assert.Equal(t, 90*time.Millisecond, r.elapsed, "the last of 10 tasks is submitted at 9 × 10ms")
		assert.Equal(
			t,
			[]time.Duration{80 * time.Millisecond, 90 * time.Millisecond},
			r.finished,
			"session i takes tasks i, i+2, ...",
		)
	})
}

func TestRunPrintsTableRuleRecommendationCSVAndCharts(t *testing.T) {
	dir := t.TempDir()
	csvPath, svgPath, pngPath := filepath.Join(
		dir,
		"rows.csv",
	), filepath.Join(
		dir,
		"chart.svg",
	), filepath.Join(
		dir,
		"chart.png",
	)
	var stdout, stderr bytes.Buffer
	args := []string{"-sessions", "4", "-tasks", "25", "-work", "0", "-duration", "20ms", "-rounds", "3",
		"-from", "10", "-to", "20", "-step", "10", "-no-progress", "-csv", csvPath, "-svg", svgPath, "-png", pngPath}
	require.Equal(t, 0, run(context.Background(), args, &stdout, &stderr), stderr.String())
	assert.Empty(t, stderr.String(), "-no-progress")

	out := fitted(t, stdout.String())
	procs := runtime.GOMAXPROCS(0)
	assert.True(
		t,
		strings.HasPrefix(
			out,
			fmt.Sprintf(
				"load: 4 sessions × 25 tasks, work 0s, sleep 0s, High 10%%, max concurrency %d, 2 producers, over "+
					"20ms\n"+
					"calibration: none, the tasks take no measurable time\n"+
					"sweep: 3 rounds × 2 thresholds (10, 20), interleaved; about 120ms (up to 360ms if the load must "+
					"be raised twice), and 120ms more to confirm a threshold that looks better\n\n",
				procs,
			),
		),
		out,
	)
	assert.Contains(t, out, "\nobjective: p99 wait over all tasks (-objective p99)\n"+
		"rule: a threshold replaces the default (10) only if its median p99 wait over the rounds is better than the "+
		"default's by 10% or more ")
	// Any answer: whether this load's sessions give way, and how its
	// thresholds compare, depends on what else the machine runs.
	assert.Regexp(
		t,
		`\nrecommendation: (WithYieldAfter\(20\)|keep the default, WithYieldAfter\(10\)): [^\n]+\nwhy: [^\n]+\n$`,
		out,
	)
	var table []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 5 && (f[0] == "10" || f[0] == "20") {
			table = append(table, f[0])
		}
	}
	assert.Equal(
		t,
		[]string{"10", "20", "10", "20"},
		table,
		"one line per threshold in each of the two tables:\n%s",
		out,
	)

	f, err := os.Open(csvPath)
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	assert.Equal(t, csvHeader, recs[0])
	var got []string
	for _, r := range recs[1:] {
		got = append(got, r[0]+"/"+r[1])
	}
	want := []string{"10/1", "10/2", "10/3", "20/1", "20/2", "20/3"}
	if strings.Contains(out, "\nconfirm: WithYieldAfter(20)") { // as many rounds again
		want = []string{"10/1", "10/2", "10/3", "10/4", "10/5", "10/6", "20/1", "20/2", "20/3", "20/4", "20/5", "20/6"}
	}
	assert.Equal(t, want, got, "threshold/round, one record each")

	svg, err := os.ReadFile(svgPath)
	require.NoError(t, err)
	assert.Contains(t, string(svg), "<svg")
	assert.Contains(
		t,
		string(svg),
		fmt.Sprintf(">yieldtune: 4 sessions, work 0s, High 10%%, max concurrency %d<", procs),
	)
	png, err := os.ReadFile(pngPath)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "a PNG file")
}

// A chart that cannot be written fails the run (exit code 1) with the
// file's error; so does a CSV file.
func TestRunFailsWhenAnOutputCannotBeWritten(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	for _, flag := range []string{"-svg", "-png", "-csv"} {
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

// Off a terminal (a log, a pipe, a test's buffer) there is no bar and no
// carriage return: a line per round instead.
func TestProgressOffATerminalIsALinePerRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		args := []string{"-sessions", "1", "-tasks", "2", "-work", "0", "-sleep", "200ms", "-duration", "1ms",
			"-from", "10", "-to", "20", "-step", "10", "-rounds", "3", "-raises", "1"}
		require.Equal(t, 0, run(context.Background(), args, &stdout, &stderr), stderr.String())
		// Each round: two thresholds × two tasks of 200 ms, one after the
		// other. One session never gives way: the load is raised once.
		assert.Equal(
			t,
			"yieldtune: round 1 of 3 done (800ms)\nyieldtune: round 2 of 3 done (1.6s)\nyieldtune: round 3 of 3 done "+
				"(2.4s)\n"+
				"yieldtune: raised 1 of 1, round 1 of 3 done (800ms)\nyieldtune: raised 1 of 1, round 2 of 3 done "+
				"(1.6s)\nyieldtune: raised 1 of 1, round 3 of 3 done (2.4s)\n",
			stderr.String(),
		)
		assert.NotContains(t, stdout.String()+stderr.String(), "\r")
	})
}

func TestOnlyATerminalIsATerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, isTerminal(f), "a file")
	assert.False(t, isTerminal(&bytes.Buffer{}), "a buffer")
}

// On a terminal, the bar counts every run of the sweep in one bar, says
// which round and threshold is running, and is cleared at the end. On the
// bubble's clock: 2 tasks of 200 ms per run, so the bar (redrawn at most
// every 100 ms) shows each task.
func TestProgressBarCountsTheWholeSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := parseFlags(
			[]string{"-sessions", "1", "-tasks", "2", "-work", "0", "-sleep", "200ms", "-duration", "1ms",
				"-from", "10", "-to", "20", "-step", "10", "-rounds", "3", "-raises", "0"},
			io.Discard,
		)
		require.NoError(t, err)
		var stdout, bar bytes.Buffer
		require.NoError(t, sweep(context.Background(), c, nil, &stdout, progress{bar: &bar}))
		var shown []string
		round := regexp.MustCompile(`round (\d/3 WithYieldAfter\(\d+\)) +(\d+%) \|`)
		for _, m := range round.FindAllStringSubmatch(bar.String(), -1) {
			if len(shown) == 0 || shown[len(shown)-1] != m[1]+" "+m[2] {
				shown = append(shown, m[1]+" "+m[2])
			}
		}
		// 12 tasks in all, each 8⅓%; each run's two tasks count on from the
		// runs before, and each round starts at the next threshold in turn.
		assert.Equal(t, []string{
			"1/3 WithYieldAfter(10) 0%", "1/3 WithYieldAfter(10) 8%", "1/3 WithYieldAfter(10) 16%",
			"1/3 WithYieldAfter(20) 25%", "1/3 WithYieldAfter(20) 33%",
			"2/3 WithYieldAfter(20) 41%", "2/3 WithYieldAfter(20) 50%",
			"2/3 WithYieldAfter(10) 58%", "2/3 WithYieldAfter(10) 66%",
			"3/3 WithYieldAfter(10) 75%", "3/3 WithYieldAfter(10) 83%",
			"3/3 WithYieldAfter(20) 91%",
		}, shown)
		assert.Regexp(t, `\r +\r$`, bar.String(), "cleared at the end")
	})
}

func TestDescribeSaysHowTheLoadIsPaced(t *testing.T) {
	c := config{sessions: 4, tasks: 25, work: 50 * time.Microsecond, high: 0.25, maxConc: 2, producers: 3}
	const load = "4 sessions × 25 tasks, work 50µs, sleep 0s, High 25%, max concurrency 2, 3 producers, "
	assert.Equal(t, load+"over 1.5s", describe(c, nil, plan{span: 1500 * time.Millisecond}))
	assert.Equal(t, load+"as fast as the producers submit", describe(c, nil, plan{}))

	tr := trace{sessions: []string{"a", "b"}, tasks: []traceTask{
		{session: 0, work: 100 * time.Microsecond}, {session: 1, high: true, sleep: 2 * time.Millisecond},
		{session: 0, work: 200 * time.Microsecond}, {at: time.Second, session: 1, sleep: 2 * time.Millisecond}}}
	c.trace = "load.csv"
	assert.Equal(
		t,
		"trace load.csv: 4 tasks, 2 sessions, mean work 75µs, mean sleep 1ms, High 25%, max concurrency 2, over 1s "+
			"as recorded",
		describe(c, &tr, plan{span: time.Second}),
	)
}

// The calibration line says what the slots ran and what the load offers
// in those terms.
func TestCalibrationLineSaysWhatIsOffered(t *testing.T) {
	assert.Equal(t, "calibration: the slots ran 400 tasks/s (median of 3 timed batches); offered 1.25× that",
		calibration(plan{capacity: 400, tasks: 500, span: time.Second}))
	assert.Equal(t, "calibration: the slots ran 400 tasks/s (median of 3 timed batches); all tasks submitted at once",
		calibration(plan{capacity: 400, tasks: 500}))
	assert.Equal(t, "calibration: none, the tasks take no measurable time",
		calibration(plan{capacity: math.Inf(1), tasks: 500, span: time.Second}))
	assert.Equal(t, "calibration: none, the tasks take no measurable time; submitted as fast as the producers can",
		calibration(plan{capacity: math.Inf(1), tasks: 500}))
}

// svgTexts are the texts an SVG chart shows, in the order drawn.
func svgTexts(svg string) []string {
	var texts []string
	for _, m := range regexp.MustCompile(`>([^<>]+)</text>`).FindAllStringSubmatch(svg, -1) {
		texts = append(texts, html.UnescapeString(m[1]))
	}
	return texts
}

// The chart is a 7-inch square per two figures; its wait axis is in
// milliseconds (p99 waits of 12 and 20 ms get ticks 0, 10 and 20), its x
// axis has a tick per threshold with the default starred, its title gives
// the answer in the text's words, and each dot is labelled with the
// table's words for it.
func TestChartIsASevenInchSquareThatGivesTheAnswer(t *testing.T) {
	results := []result{
		synthResult(10, []float64{1000, 1010, 990}, []time.Duration{20 * ms, 19 * ms, 21 * ms}),
		synthResult(20, []float64{1200, 1190, 1210}, []time.Duration{12 * ms, 11 * ms, 13 * ms}),
	}
	j := judge(results, 10, figP99)
	require.Equal(t, 20, j.Pick)
	var b bytes.Buffer
	require.NoError(t, writeChart(&b, "svg", results, j, "title"))
	svg := b.String()
	assert.Contains(t, svg, `<svg width="504pt" height="504pt"`)
	texts := svgTexts(svg)
	assert.Equal(
		t,
		[]string{"title", "WithYieldAfter(20): better than the default (10) on p99 wait by 40%, beyond the spread"},
		texts[:2],
	)
	i := slices.Index(texts, "p99 wait, all tasks (ms), the objective")
	require.True(t, i >= 0, "axis label in %q", texts)
	assert.Equal(
		t,
		[]string{"0", "10", "20", "default", "-40% better"},
		texts[i+1:i+6],
		"the wait axis' ticks, then each dot's words",
	)
	assert.Equal(t, []string{"10*", "20"}, texts[i-2:i], "the thresholds' ticks")
	k := slices.Index(texts, "throughput (tasks/s)")
	require.True(t, k >= 0, "axis label in %q", texts)
	assert.Equal(t, []string{"default", "+20% better"}, texts[len(texts)-2:])
}

// A load with High tasks gets a third chart, their p99 wait, which the
// rule weighs too; the canvas grows to keep each chart's height.
func TestChartShowsHighWaitsWhenTheLoadHasHighTasks(t *testing.T) {
	results := []result{
		withHigh(
			synthResult(10, []float64{1000, 1010, 990}, []time.Duration{20 * ms, 19 * ms, 21 * ms}),
			250*ms,
			250*ms,
			250*ms,
		),
		withHigh(
			synthResult(20, []float64{1200, 1190, 1210}, []time.Duration{12 * ms, 11 * ms, 13 * ms}),
			250*ms,
			250*ms,
			250*ms,
		),
	}
	var b bytes.Buffer
	require.NoError(t, writeChart(&b, "svg", results, judge(results, 10, figP99), "title"))
	svg := b.String()
	assert.Contains(t, svg, `<svg width="504pt" height="756pt"`)
	texts := svgTexts(svg)
	i := slices.Index(texts, "p99 wait, High tasks (ms)")
	require.True(t, i >= 0, "axis label in %q", texts)
	assert.Equal(
		t,
		[]string{"0", "250", "default", "0% same"},
		texts[i+1:],
		"the High wait axis' ticks, plain numbers (gonum's own say 0.00 and 250.00), and the words",
	)
}

// On the bubble's clock: two sessions of tasks that only sleep, one slot,
// offered 0.9 times what the slot runs: no queue builds, no session gives
// way; the sweep raises the load once, to 1.8 times, and then sessions
// give way at the default in every round.
func TestSweepRaisesTheLoadUntilSessionsGiveWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := parseFlags(
			[]string{"-sessions", "2", "-tasks", "100", "-work", "0", "-sleep", "1ms", "-max-concurrency", "1",
				"-producers", "1", "-load", "0.9", "-rounds", "3", "-from", "10", "-to", "30", "-step", "20",
				"-high", "0"},
			&bytes.Buffer{},
		)
		require.NoError(t, err)
		var out bytes.Buffer
		require.NoError(t, sweep(context.Background(), c, nil, &out, progress{}))
		got := fitted(t, out.String())
		assert.Contains(
			t,
			got,
			"\nraised (1 of 2): sessions gave way at the default less than once per 100 tasks in 3 of 3 rounds; "+
				"the load now offers 1.80× what the slots ran\n\n  yield",
			got,
		)
		assert.NotContains(t, got, "raised (2 of 2)")
		assert.Contains(
			t,
			got,
			"\nrecommendation: keep the default, WithYieldAfter(10): no threshold is better on p99 wait\n",
		)
		assert.Regexp(
			t,
			`\n +10 +[0-9.]+–[0-9.]+ +[0-9.]+ +[0-9.]+ms +default\n`,
			got,
			"a range of yields per 100 tasks at the default",
		)
	})
}

// One session never gives way, however much it is offered: after its
// budget of raises the sweep says the threshold does not matter.
func TestSweepSaysTheThresholdDoesNotMatterWhenRaisingDoesNotHelp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := parseFlags(
			[]string{"-sessions", "1", "-tasks", "30", "-work", "0", "-sleep", "1ms", "-max-concurrency", "1",
				"-producers", "1", "-load", "2", "-rounds", "3", "-from", "10", "-to", "30", "-step", "20",
				"-high", "0"},
			&bytes.Buffer{},
		)
		require.NoError(t, err)
		var out bytes.Buffer
		require.NoError(t, sweep(context.Background(), c, nil, &out, progress{}))
		got := fitted(t, out.String())
		assert.Contains(
			t,
			got,
			"\nraised (1 of 2): sessions gave way at the default less than once per 100 tasks in 3 of 3 rounds; "+
				"the load now offers 4.00× what the slots ran\n\nraised (2 of 2): sessions gave way at the default "+
				"less than once per 100 tasks in 3 of 3 rounds; "+
				"the load now offers 8.00× what the slots ran\n\n  yield",
			got,
		)
		assert.Contains(
			t,
			got,
			"\nrecommendation: keep the default, WithYieldAfter(10): the threshold does not matter for this load\n"+
				"why: no session gave way at any threshold, so every threshold scheduled it alike\n",
		)
	})
}

// With -raises 0 the load is never raised, and a load that cannot be
// raised (a trace whose tasks all arrive at once) says so.
func TestSweepRaisesNothingWithoutABudgetOrAPace(t *testing.T) {
	sweep1 := []string{"-max-concurrency", "1", "-rounds", "3", "-from", "10", "-to", "30", "-step", "20"}
	oneSession := []string{
		"-sessions",
		"1",
		"-tasks",
		"30",
		"-producers",
		"1",
		"-high",
		"0",
		"-work",
		"0",
		"-sleep",
		"1ms",
	}
	atOnce := &trace{sessions: []string{"a"}, tasks: []traceTask{{sleep: time.Millisecond}, {sleep: time.Millisecond}}}
	for _, tc := range []struct {
		name string
		args []string
		tr   *trace
		says string
	}{
		{"-raises 0", append(append([]string{"-raises", "0", "-load", "2"}, sweep1...), oneSession...), nil,
			"about 180ms, and 180ms more to confirm a threshold that looks better\n\n  yield"},
		{"all at once", append([]string{"-trace", "at-once.csv"}, sweep1...), atOnce,
			"\n\nnot raised: sessions gave way at the default less than once per 100 tasks in 3 of 3 rounds, and " +
				"every task is already submitted at once\n\n  yield"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, err := parseFlags(tc.args, &bytes.Buffer{})
				require.NoError(t, err)
				var out bytes.Buffer
				require.NoError(t, sweep(context.Background(), c, tc.tr, &out, progress{}))
				got := fitted(t, out.String())
				assert.NotContains(t, got, "raised (")
				assert.Contains(t, got, tc.says)
				assert.Contains(
					t,
					got,
					"recommendation: keep the default, WithYieldAfter(10): the threshold does not matter for this "+
						"load\n",
				)
			})
		})
	}
}

// fitted checks that no line of out is wider than width columns and
// returns out with its wrapped lines joined again, so that a test can look
// for a sentence whatever the width of its words.
func fitted(t *testing.T, out string) string {
	t.Helper()
	for i, l := range strings.Split(out, "\n") {
		assert.LessOrEqual(t, utf8.RuneCountInString(l), width, "line %d is wider than %d columns: %q", i+1, width, l)
	}
	return regexp.MustCompile(`([^\n])\n  ([^ \n])`).ReplaceAllString(out, "$1 $2")
}
