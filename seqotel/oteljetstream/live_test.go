package oteljetstream_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqjetstream"
)

// startServer starts an embedded nats-server with JetStream for the test,
// on 127.0.0.1 and a free port, and returns a JetStream client of it.
func startServer(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server not ready")
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// A live consumer on an embedded server, read while each of three
// messages (three subjects, so all run at once) is in its handler, then
// after Close: the figures the consumer's own Stats has, under their
// names.
func TestALiveConsumersFigures(t *testing.T) {
	const messages = 3
	js := startServer(t)
	ctx := context.Background()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "ORDERS", Subjects: []string{"orders.*"}, Storage: jetstream.MemoryStorage,
	})
	require.NoError(t, err)
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	for i := range messages {
		_, err := js.Publish(ctx, "orders."+strconv.Itoa(i), nil)
		require.NoError(t, err)
	}

	entered := make(chan struct{}, messages)
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, func(ctx context.Context, msg jetstream.Msg) error {
		entered <- struct{}{}
		<-gate
		return nil
	}, seqjetstream.WithMaxConcurrency(messages))
	require.NoError(t, err)
	r := newReader(t, c)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	closed := false
	t.Cleanup(func() {
		if !closed {
			open()
			_ = c.Close(ctx)
			<-ran
		}
	})
	for range messages {
		<-entered
	}

	got, err := collect(t, ctx, r)
	require.NoError(t, err)
	billing := "{consumer=billing,stream=ORDERS}"
	assert.Equal(t, float64(messages), got["seqsched.jetstream.received"+billing])
	assert.Equal(t, float64(messages), got["seqsched.jetstream.in_flight"+billing])
	assert.Equal(t, float64(messages), got["seqsched.jetstream.buffered"+billing])
	assert.Equal(t, 0.0, got["seqsched.jetstream.acked"+billing])
	assert.Equal(t, 1.0, got["seqsched.jetstream.owned"+billing], "a plain consumer is always owned")
	assert.Equal(t, 0.0, got["seqsched.jetstream.catching_up"+billing])
	assert.Equal(t, 1.0, got["seqsched.jetstream.assigned"+billing], "assigned without WithBalance")
	assert.Equal(t, float64(messages), got["seqsched.jetstream.queue_time_count{}"], "each message started")
	assert.Equal(t, 0.0, got["seqsched.jetstream.handler.duration_count{}"], "no handler returned")

	open()
	closeCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	closed = true
	require.NoError(t, c.Close(closeCtx))
	require.NoError(t, <-ran)
	got, err = collect(t, ctx, r)
	require.NoError(t, err)
	assert.Equal(t, float64(messages), got["seqsched.jetstream.acked"+billing])
	assert.Equal(t, 0.0, got["seqsched.jetstream.in_flight"+billing])
	assert.Equal(t, 0.0, got["seqsched.jetstream.buffered"+billing])
	assert.Equal(t, float64(messages), got["seqsched.jetstream.handler.duration_count{}"])
}
