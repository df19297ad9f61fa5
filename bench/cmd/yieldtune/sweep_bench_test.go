package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

var recommended = regexp.MustCompile(`\nrecommendation: (?:keep the default, )?WithYieldAfter\((\d+)\)`)

// BenchmarkQuickSweep runs `yieldtune -quick` on the live machine (under
// -short, a quarter of its tasks and 3 rounds) and reports the threshold
// it recommends and how many times it raised the load. It is a benchmark,
// not a test, because nothing a live load measures on a shared 2-core
// machine holds whatever else the machine runs: not that sessions yield,
// not that two runs agree. The rule's answers are tested on recorded
// sweeps instead (TestRecordedQuickRunsGiveOneAnswer), and the ten runs
// behind those recordings are in README.md.
func BenchmarkQuickSweep(b *testing.B) {
	args := []string{"-quick"}
	if testing.Short() {
		args = append(args, "-tasks", "25", "-rounds", "3")
	}
	c, err := parseFlags(args, io.Discard)
	require.NoError(b, err)
	var out bytes.Buffer
	for b.Loop() {
		out.Reset()
		require.NoError(b, sweep(context.Background(), c, nil, &out, progress{}))
	}
	m := recommended.FindStringSubmatch(out.String())
	require.NotNil(b, m, "no recommendation in:\n%s", out.String())
	pick, err := strconv.Atoi(m[1])
	require.NoError(b, err)
	b.ReportMetric(float64(pick), "WithYieldAfter")
	b.ReportMetric(float64(bytes.Count(out.Bytes(), []byte("\nraised ("))), "raises")
	b.Logf("last run:\n%s", out.String())
}
