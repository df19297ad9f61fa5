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

// A bad flag ends the program with exit code 2 before anything runs. A
// value the flag package accepts but the run cannot use gets one line.
func TestBadFlagExitsTwo(t *testing.T) {
	cases := map[string]struct {
		args  []string
		want  string
		usage bool // the flag package's own error, followed by the usage
	}{
		"unknown flag":      {[]string{"-nope"}, "flag provided but not defined: -nope", true},
		"no accounts":       {[]string{"-accounts", "0"}, "bank: -accounts 0: must be 1..1000000", false},
		"too many accounts": {[]string{"-accounts", "3000000000"}, "bank: -accounts 3000000000: must be 1..1000000", false},
		"accounts overflow": {[]string{"-accounts", "9223372036854775807"}, "bank: -accounts 9223372036854775807: must be 1..1000000", false},
		"one traffic":       {[]string{"-traffic", "1"}, "bank: -traffic 1: must be 2..1000000 (a transfer needs two accounts)", false},
		"too much traffic":  {[]string{"-traffic", "3000000000"}, "bank: -traffic 3000000000: must be 2..1000000 (a transfer needs two accounts)", false},
		"no workers":        {[]string{"-workers", "0"}, "bank: -workers 0: must be 1..10000", false},
		"too many workers":  {[]string{"-workers", "3000000000"}, "bank: -workers 3000000000: must be 1..10000", false},
		"workers overflow":  {[]string{"-workers", "9223372036854775807"}, "bank: -workers 9223372036854775807: must be 1..10000", false},
		"negative window":   {[]string{"-window", "-1"}, "bank: -window -1: must be at least 1", false},
		"stray argument":    {[]string{"extra"}, `bank: unexpected argument "extra" (all options are flags)`, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			assert.Equal(t, 2, run(context.Background(), tc.args, &out, &errOut))
			assert.Empty(t, out.String(), "nothing ran")
			if tc.usage {
				assert.True(t, strings.HasPrefix(errOut.String(), tc.want+"\n"), errOut.String())
			} else {
				assert.Equal(t, tc.want+"\n", errOut.String(), "one line")
			}
		})
	}
}
