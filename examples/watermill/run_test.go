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

func TestSeqwatermillKeepsOrderWhereThePlainRouterCannot(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"-events", "3000", "-accounts", "1000", "-latency", "1ms"}, &out, &errOut)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "watermill: 3000 events, 1000 accounts, handler 1ms, on gochannel\n")
	assert.Regexp(t, `plain Router, default gochannel: +\d+ events/s, order violations \d+ `, out.String())
	assert.Regexp(t, `plain Router, ordered gochannel: +\d+ events/s, order violations 0 \(one at a time; first 1000 events\)`, out.String())
	assert.Regexp(t, `Router \+ seqwatermill, ordered gochannel: +\d+ events/s, order violations 0 `, out.String())
	assert.Empty(t, errOut.String())
	t.Log("\n" + out.String())
}

func TestBadFlagsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"-events", "5"}, {"-nope"}, {"stray"}, {"-accounts", "0"}, {"-latency", "-1ms"}, {"-timeout", "0s"},
	} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, run(context.Background(), args, &out, &errOut), "%v", args)
		assert.Empty(t, out.String())
		assert.NotEmpty(t, errOut.String())
	}
	var out, errOut bytes.Buffer
	assert.Equal(t, 0, run(context.Background(), []string{"-h"}, &out, &errOut))
}
