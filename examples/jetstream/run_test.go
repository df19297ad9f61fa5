package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestKilledInstanceLosesNothingAndBreaksNoOrder(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"-messages", "1500", "-keys", "40", "-partitions", "3",
		"-latency", "1ms", "-concurrency", "4"}, &out, &errOut)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	for _, want := range []string{
		"jetstream: 1500 messages, 40 keys (zipf), 3 partitions, handler 0–1ms, on nats-server ",
		"seqjetstream, 3 instances, instance-",
		"  lost:                0\n",
		"  order violations:    0\n",
		"  duplicates applied:  0 (",
		"  stale writes fenced: ",
	} {
		assert.Contains(t, out.String(), want)
	}
	assert.Regexp(t, regexp.MustCompile(`killed at \d+ applied \(it owned [1-3] partitions\)`), out.String())
	// Three partitions: two instances hold two and one, then one each,
	// then the survivors two and one.
	assert.Regexp(t, `\n  partitions before scale-out: +instance-\d \[\d( \d)?\], instance-\d \[\d( \d)?\]\n`, out.String())
	assert.Regexp(t, `\n  partitions after scale-out: +instance-\d \[\d\], instance-\d \[\d\], instance-\d \[\d\]\n`, out.String())
	assert.Regexp(t, `\n  partitions after the kill: +instance-\d \[\d( \d)?\], instance-\d \[\d( \d)?\]\n`, out.String())
	assert.NotContains(t, out.String(), "not settled")
	assert.Regexp(t, `seqjetstream, 4 handlers: +\d+ msg/s \(.*\), order violations 0\n`, out.String())
	assert.Regexp(t, `a consumer per partition, MaxAckPending=1: +\d+ msg/s \(.*\), order violations 0\n`, out.String())
	assert.Regexp(t, `a pool of 4 workers on one consumer: +\d+ msg/s \(.*\), order violations \d+\n`, out.String())
	t.Log("\n" + out.String())
}

func TestBadFlagsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"-messages", "5"}, {"-nope"}, {"stray"}, {"-instances", "1"}, {"-partitions", "0"}, {"-timeout", "0s"},
	} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, run(context.Background(), args, &out, &errOut), "%v", args)
		assert.Empty(t, out.String())
		assert.NotEmpty(t, errOut.String())
	}
	var out, errOut bytes.Buffer
	assert.Equal(t, 0, run(context.Background(), []string{"-h"}, &out, &errOut))
}
