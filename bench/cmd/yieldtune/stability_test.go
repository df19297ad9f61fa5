package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var recommended = regexp.MustCompile(`\nrecommendation: (?:keep the default, )?(WithYieldAfter\(\d+\))`)

// The point of the rounds and the rule: the same load on the same machine
// gets the same answer. Three -quick runs in a row must agree (under
// -short, on a quarter of -quick's tasks per run).
func TestThreeQuickRunsAgree(t *testing.T) {
	args := []string{"-quick", "-no-progress"}
	if testing.Short() {
		args = append(args, "-tasks", "25")
	}
	var got []string
	var outs bytes.Buffer
	for range 3 {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, run(context.Background(), args, &stdout, &stderr), stderr.String())
		m := recommended.FindStringSubmatch(stdout.String())
		require.NotNil(t, m, "no recommendation in:\n%s", stdout.String())
		got = append(got, m[1])
		outs.Write(stdout.Bytes())
	}
	assert.Equal(t, []string{got[0], got[0], got[0]}, got, "the three runs:\n%s", outs.String())
	t.Logf("%v", got)
}
