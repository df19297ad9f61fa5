package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestSmallRunLosesNothingAndKeepsOrder(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"-records", "1500", "-keys", "40", "-partitions", "3",
		"-latency", "1ms", "-poison", "3", "-concurrency", "2"}, &out, &errOut)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	for _, want := range []string{
		"kafka: 1500 records, 40 keys (zipf), 3 partitions on a 3-broker kfake cluster on 127.0.0.1\n",
		"members:            3, then member 2 killed ungracefully halfway and 1 added\n",
		"order violations:   0 (max per key, Normal records)\n",
		"lost:               0\n",
		"duplicates applied: 0 (",
		"dead-lettered:      3\n",
	} {
		assert.Contains(t, out.String(), want)
	}
	assert.Regexp(t, `goroutine per partition: \S+; speed-up \d+\.\dx`, out.String())
}

func TestBadFlagsExitTwo(t *testing.T) {
	for _, args := range [][]string{{"-records", "5"}, {"-nope"}, {"stray"}, {"-poison", "100", "-records", "100"}} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, run(context.Background(), args, &out, &errOut), "%v", args)
		assert.Empty(t, out.String())
	}
}
