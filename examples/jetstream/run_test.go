package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The program as a user first runs it: its default flags (20,000
// messages, more than nats.go lets PublishAsync hold unacknowledged). The
// race detector makes it several times slower, so a -race build runs the
// smaller scenario below instead, and CI runs this one without -race.
func TestDefaultRunLosesNothingAndBreaksNoOrder(t *testing.T) {
	if raceEnabled {
		t.Skip("the default run is tested without -race (CI runs it so); see TestKilledInstanceLosesNothingAndBreaksNoOrder")
	}
	var out, errOut bytes.Buffer
	code := run(context.Background(), nil, &out, &errOut)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	for _, want := range []string{
		"jetstream: 20000 messages, 1000 keys (zipf), 6 partitions, handler 0–2ms, on nats-server ",
		"seqjetstream, 3 instances, instance-",
		"  lost:                0\n",
		"  order violations:    0\n",
		"  duplicates applied:  0 (",
		"  stale writes fenced: ",
	} {
		assert.Contains(t, out.String(), want)
	}
	assert.Regexp(t, regexp.MustCompile(`killed at \d+ applied \(it owned [1-6] partitions\)`), out.String())
	// Six partitions: two instances hold three each, then two each, then
	// the survivors three each.
	three, two := `\[\d \d \d\]`, `\[\d \d\]`
	assert.Regexp(t, `\n  partitions before scale-out: +instance-\d `+three+`, instance-\d `+three+`\n`, out.String())
	assert.Regexp(t, `\n  partitions after scale-out: +instance-\d `+two+`, instance-\d `+two+`, instance-\d `+two+`\n`, out.String())
	assert.Regexp(t, `\n  partitions after the kill: +instance-\d `+three+`, instance-\d `+three+`\n`, out.String())
	assert.NotContains(t, out.String(), "not settled")
	assert.Regexp(t, `seqjetstream, 64 handlers: +\d+ msg/s \(.*\), order violations 0\n`, out.String())
	assert.Regexp(t, `a consumer per partition, MaxAckPending=1: +\d+ msg/s \(.*\), order violations 0\n`, out.String())
	assert.Regexp(t, `a pool of 64 workers on one consumer: +\d+ msg/s \(.*\), order violations \d+\n`, out.String())
	t.Log("\n" + out.String())
}

// publish keeps the default 20,000 messages within nats.go's limit of
// unacknowledged PublishAsync calls (4,000), which refused them before.
func TestPublishesTheDefaultCountAsync(t *testing.T) {
	srv, dir, err := startServer()
	require.NoError(t, err)
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}()
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.*"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	keys, _ := plan(params{messages: 20000, keys: 1000})
	cjs := &countingJS{JetStream: js}
	require.NoError(t, publish(context.Background(), cjs, keys))
	assert.LessOrEqual(t, cjs.most, publishWindow, "PublishAsync calls outstanding at once")
	t.Logf("at most %d outstanding", cjs.most)
}

// countingJS records the most PublishAsync calls outstanding at once.
type countingJS struct {
	jetstream.JetStream
	most int
}

func (c *countingJS) PublishAsync(subj string, data []byte, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	c.most = max(c.most, c.PublishAsyncPending()+1)
	return c.JetStream.PublishAsync(subj, data, opts...)
}

// The default scenario, smaller: a scale-out and a kill, checked alike.
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
