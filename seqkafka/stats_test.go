package seqkafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqkafka"
)

func sum(b [seqsched.HistogramBuckets]uint64) (n uint64) {
	for _, v := range b {
		n += v
	}
	return n
}

// Stats after a known workload: 4 records handled at once, 1 after a
// retry, 1 dead-lettered after 2 attempts, on partition 0; 2 on
// partition 1.
func TestStatsCountsAKnownWorkload(t *testing.T) {
	c := cluster(t, 2)
	produce(t, c, []*kgo.Record{
		rec(0, "a", "ok"), rec(0, "b", "ok"), rec(0, "c", "ok"), rec(0, "d", "ok"),
		rec(0, "e", "once"), rec(0, "f", "poison"),
		rec(1, "g", "ok"), rec(1, "h", "slow"),
	})
	st := newStore()
	var mu sync.Mutex
	tries := map[string]int{}
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		v := string(r.Value)
		mu.Lock()
		tries[string(r.Key)]++
		n := tries[string(r.Key)]
		mu.Unlock()
		switch {
		case v == "poison", v == "once" && n == 1:
			return errors.New("fails")
		case v == "slow":
			time.Sleep(3 * time.Millisecond) // lands in the 5ms bucket or above
		}
		st.apply(r)
		return nil
	}, seqkafka.WithRetries(2, fixedBackoff(0)),
		seqkafka.WithCommitInterval(10*time.Millisecond),
		seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
			st.apply(r)
			return nil
		}))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(8)
	require.Eventually(t, func() bool {
		s := cons.Stats()
		return len(s.Partitions) == 2 && s.Partitions[0].Committed == 6 && s.Partitions[1].Committed == 2
	}, 10*time.Second, time.Millisecond, "commits did not reach the end")
	s := cons.Stats()
	require.NoError(t, m.close(t, 10*time.Second))

	require.False(t, s.Paused)
	require.Equal(t, 0, s.Buffered)
	require.Equal(t, 0, s.InFlight)
	require.Equal(t, uint64(7), s.Processed)
	require.Equal(t, uint64(2), s.Retries, "once and poison, one retry each")
	require.Equal(t, uint64(1), s.DeadLettered)
	require.Zero(t, s.Skipped)
	require.NotZero(t, s.Commits)
	require.Zero(t, s.CommitErrors)
	require.Equal(t, uint64(10), s.HandlerTime.Count, "8 records, 2 retries")
	require.Equal(t, s.HandlerTime.Count, sum(s.HandlerTime.Buckets))
	require.Equal(t, uint64(8), s.QueueTime.Count, "one per record")
	require.Equal(t, s.QueueTime.Count, sum(s.QueueTime.Buckets))
	require.GreaterOrEqual(t, s.HandlerTime.Sum, 3*time.Millisecond)
	bounds := seqsched.HistogramBounds()
	slow := uint64(0)
	for i, n := range s.HandlerTime.Buckets {
		if i == len(bounds) || bounds[i] >= 5*time.Millisecond {
			slow += n
		}
	}
	require.GreaterOrEqual(t, slow, uint64(1), "the 3ms handler call is in a bucket of 5ms or above")

	require.Equal(t, []seqkafka.PartitionStats{
		{Topic: "t", Partition: 0, Committed: 6, Watermark: 6, HighWatermark: 6, Lag: 0,
			Processed: 5, Retries: 2, DeadLettered: 1},
		{Topic: "t", Partition: 1, Committed: 2, Watermark: 2, HighWatermark: 2, Lag: 0,
			Processed: 2},
	}, s.Partitions)
}

// Lag counts the records not done yet, fetched or not; Buffered and
// InFlight those fetched.
func TestStatsLagAndInFlight(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", ""), rec(0, "a", ""), rec(0, "b", "")})
	g := newGate()
	st := newStore()
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if r.Offset == 0 {
			if err := g.wait(ctx, 0); err != nil {
				return err
			}
		}
		st.apply(r)
		return nil
	})
	require.NoError(t, err)
	m := startMember(t, cons)
	<-g.entered
	<-st.at(1) // b's handler applied it; a's two records wait
	// b is done once its handler has returned and the consumer has taken
	// it off the buffer, just after st.at fires; nothing signals that
	// moment, so wait for it (a bounded wait for a state, not a sleep: it
	// fails if b is never taken off), then check every figure exactly.
	require.Eventually(t, func() bool { return cons.Stats().Buffered == 2 }, 10*time.Second, time.Millisecond)
	s := cons.Stats()
	require.Equal(t, 2, s.Buffered)
	require.Equal(t, 1, s.InFlight)
	require.Equal(t, seqkafka.PartitionStats{
		Topic: "t", Partition: 0, Committed: -1, Watermark: 0, HighWatermark: 3, Lag: 3,
		Buffered: 2, InFlight: 1, Processed: 1,
	}, s.Partitions[0])
	close(g.open)
	<-st.at(3)
	require.NoError(t, m.close(t, 10*time.Second))
}

// HandlerTime counts every handler call, retries included; QueueTime
// counts each record once, up to its first call.
func TestStatsHandlerTimeCountsEveryHandlerCall(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "flaky"), rec(0, "a", "ok")})
	st := newStore()
	var once sync.Once
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		failed := false
		if string(r.Value) == "flaky" {
			once.Do(func() { failed = true })
		}
		if failed {
			return errors.New("not yet")
		}
		st.apply(r)
		return nil
	}, seqkafka.WithRetries(2, fixedBackoff(0)))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(2)
	require.NoError(t, m.close(t, 10*time.Second))
	s := cons.Stats()
	require.Equal(t, uint64(3), s.HandlerTime.Count, "2 records, 1 retry")
	require.Equal(t, uint64(2), s.QueueTime.Count, "one per record")
	require.Equal(t, uint64(1), s.Retries)
}
