package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// small keeps the runs short under -race.
var small = []string{"-accounts", "60", "-traffic", "10", "-workers", "3", "-window", "5"}

func TestOrderedRunPrintsSummaryAndExitsZero(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	args := append([]string{"-db", filepath.Join(dir, "b.db"), "-journal", filepath.Join(dir, "j.log")}, small...)
	code := run(context.Background(), args, &out, &errOut)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	for _, want := range []string{
		"bank: 60 accounts x [withdraw 50, deposit 100, withdraw 150] from balance 100,",
		"ordered by seqsched",
		"operations: 360 in ",
		"failures:   0\n",
		"every balance is exactly 0: OK",
	} {
		assert.Contains(t, out.String(), want)
	}
	assert.Regexp(t, `latency:    p50 \S+, p99 \S+, max \S+`, out.String())
	// 180 script steps commit, plus the traffic transfers that did.
	m := regexp.MustCompile(`journal:    (\d+) lines`).FindStringSubmatch(out.String())
	require.NotNil(t, m)
	n, _ := strconv.Atoi(m[1])
	assert.GreaterOrEqual(t, n, 180)
}

// Without the scheduler, the three steps of an account race, so some
// usually run out of order. Whether they do in a given run is up to the Go
// scheduler, so this test checks the report, not the count: exit code 1
// exactly when failures are printed, one line each.
func TestUnorderedRunReportsWhatWentWrong(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"-unordered"}, small...), &out, &errOut)
	assert.Empty(t, errOut.String())
	assert.Contains(t, out.String(), "UNORDERED: plain goroutines")
	m := regexp.MustCompile(`failures:   (\d+)(, on \d+ accounts)?\n`).FindStringSubmatch(out.String())
	require.NotNil(t, m, out.String())
	n, _ := strconv.Atoi(m[1])
	if n == 0 {
		assert.Equal(t, 0, code)
		return
	}
	assert.Equal(t, 1, code)
	listed := strings.Count(out.String(), "\n  account ")
	assert.Equal(t, min(n, maxShown), listed, out.String())
}

func TestBadFlagExitsTwo(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"-nope"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "flag provided but not defined: -nope")
}
