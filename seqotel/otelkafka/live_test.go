package otelkafka_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqsched/seqsched/seqkafka"
)

// A live consumer on an in-process cluster, read while each of five
// records (five keys, so all run at once) is in its handler, then after
// Close: the figures the consumer's own Stats has, under their names.
func TestALiveConsumersFigures(t *testing.T) {
	const records = 5
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	var rs []*kgo.Record
	for i := range records {
		rs = append(rs, &kgo.Record{Topic: "orders", Key: []byte(strconv.Itoa(i))})
	}
	require.NoError(t, cl.ProduceSync(context.Background(), rs...).FirstErr())
	cl.Close()

	entered := make(chan struct{}, records)
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	cons, err := seqkafka.NewConsumer([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, func(ctx context.Context, r *kgo.Record) error {
		entered <- struct{}{}
		<-gate
		return nil
	}, seqkafka.WithMaxConcurrency(records))
	require.NoError(t, err)
	r := newReader(t, cons)
	ran := make(chan error, 1)
	go func() { ran <- cons.Run(context.Background()) }()
	closed := false
	t.Cleanup(func() {
		if !closed {
			open()
			_ = cons.Close(context.Background())
			<-ran
		}
	})
	for range records {
		<-entered
	}

	got, err := collect(t, context.Background(), r)
	require.NoError(t, err)
	p0 := "{partition=0,topic=orders}"
	assert.Equal(t, float64(records), got["seqsched.kafka.in_flight"+p0])
	assert.Equal(t, float64(records), got["seqsched.kafka.buffered"+p0])
	assert.Equal(t, float64(records), got["seqsched.kafka.lag"+p0], "high watermark 5, nothing done")
	assert.Equal(t, 0.0, got["seqsched.kafka.processed"+p0])
	assert.Equal(t, float64(records), got["seqsched.kafka.queue_time_count{}"], "each record started")
	assert.Equal(t, 0.0, got["seqsched.kafka.handler.duration_count{}"], "no handler call returned")

	open()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	closed = true
	require.NoError(t, cons.Close(ctx))
	require.NoError(t, <-ran)
	got, err = collect(t, context.Background(), r)
	require.NoError(t, err)
	st := cons.Stats()
	assert.Equal(t, uint64(records), st.Processed)
	assert.Equal(t, float64(records), got["seqsched.kafka.handler.duration_count{}"])
	assert.Equal(t, float64(st.Commits), got["seqsched.kafka.commits{}"])
	assert.Equal(t, 0.0, got["seqsched.kafka.commit_errors{}"])
	assert.Equal(t, len(st.Partitions), countPrefix(got, "seqsched.kafka.processed{"), "a data point per partition still assigned")
}

func countPrefix(m map[string]float64, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}
