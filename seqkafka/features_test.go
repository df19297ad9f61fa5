package seqkafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/seqsched/seqsched/seqkafka"
)

func TestRestartSkipsRecordsTheMetadataMarksDone(t *testing.T) {
	c := cluster(t, 1)
	st, w := doneAboveStuck(t, c) // 1..9 done; 0 is stuck

	seen := w.all()
	require.NotEmpty(t, seen)
	last := seen[len(seen)-1]
	require.Equal(t, int64(0), last.offset, "the watermark stays at the stuck record")
	wm, done, err := seqkafka.DecodeMetadata(last.meta)
	require.NoError(t, err)
	require.Equal(t, int64(0), wm)
	require.Equal(t, []seqkafka.OffsetRange{{From: 1, To: 10}}, done)

	// The next owner replays only offset 0.
	var got []int64
	var mu sync.Mutex
	b, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		mu.Lock()
		got = append(got, r.Offset)
		mu.Unlock()
		st.apply(r)
		return nil
	})
	require.NoError(t, err)
	mb := startMember(t, b)
	<-st.at(10)
	require.NoError(t, mb.close(t, 10*time.Second))
	require.Equal(t, []int64{0}, got)
	require.Equal(t, uint64(9), b.Stats().Skipped)
}

// commitRaw commits offset with metadata for group "g" as an admin tool
// would, outside any group generation.
func commitRaw(t *testing.T, c interface{ ListenAddrs() []string }, offset int64, meta string) {
	t.Helper()
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.OffsetCommit), 9) // by topic name, not ID
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.MaxVersions(v))
	require.NoError(t, err)
	defer cl.Close()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = "g"
	req.Generation = -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.Metadata = 0, offset, &meta
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	require.NoError(t, err)
	require.Zero(t, resp.Topics[0].Partitions[0].ErrorCode)
}

func TestForeignOrCorruptMetadataIsIgnoredWithAWarning(t *testing.T) {
	for name, meta := range map[string]string{
		"corrupt": "seqsched1:AQIAAwaTBeDX",
		"foreign": "some-other-tool:{\"done\":[1,2]}",
		// Valid ranges, but written for watermark 0 while 1 is committed.
		"stale": "seqsched1:AQIAAwaTBeDQ",
	} {
		t.Run(name, func(t *testing.T) {
			c := cluster(t, 1)
			produce(t, c, []*kgo.Record{rec(0, "a", ""), rec(0, "b", ""), rec(0, "c", ""), rec(0, "d", "")})
			commitRaw(t, c, 1, meta)
			st := newStore()
			logs := newLogSink()
			cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
				st.apply(r)
				return nil
			}, seqkafka.WithLogger(logs.logger()))
			require.NoError(t, err)
			m := startMember(t, cons)
			<-st.at(3) // offsets 1..3: all replayed, none skipped
			<-logs.when("ignoring commit metadata")
			require.NoError(t, m.close(t, 10*time.Second))
			require.Zero(t, cons.Stats().Skipped)
			require.False(t, st.isApplied(0, 0), "offset 0, below the commit, was consumed")
		})
	}
}

func TestBackpressurePausesAtTheHighMarkAndResumes(t *testing.T) {
	c := cluster(t, 1)
	const n = 60
	produce(t, c, keyed(n, 1, n))
	st := newStore()
	g := newGate()
	var cons *seqkafka.Consumer
	var mu sync.Mutex
	maxBuffered := 0
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		b := cons.Stats().Buffered
		mu.Lock()
		maxBuffered = max(maxBuffered, b)
		mu.Unlock()
		if err := g.wait(ctx, r.Offset); err != nil {
			return err
		}
		st.apply(r)
		return nil
	}, seqkafka.WithMaxConcurrency(4), seqkafka.WithMaxBuffered(10, 5))
	require.NoError(t, err)
	m := startMember(t, cons)
	for range 4 {
		<-g.entered
	}
	require.Eventually(t, func() bool {
		s := cons.Stats()
		return len(s.Partitions) == 1 && s.Partitions[0].Paused
	}, 10*time.Second, time.Millisecond, "the partition was not paused at the high mark")
	s := cons.Stats()
	// 10 taken, and what the last poll brought beyond them waits: a poll
	// takes at most (10-5)/2 = 2 records.
	require.GreaterOrEqual(t, s.Buffered, 11, "buffered at the high mark")
	require.LessOrEqual(t, s.Buffered, 12, "buffered at the high mark")
	require.Equal(t, s.Buffered, s.Partitions[0].Buffered)
	require.Equal(t, 4, s.InFlight)
	require.False(t, s.Paused, "the consumer itself is not paused")
	go func() { // drain the gate's log of entries while records flow
		for range g.entered {
		}
	}()
	close(g.open)
	<-st.at(n)
	require.NoError(t, m.close(t, 10*time.Second))
	close(g.entered)
	require.LessOrEqual(t, maxBuffered, 12)
	require.Empty(t, cons.Stats().Partitions, "no partition after Close")
}

func TestHighPriorityOvertakesItsKeysQueue(t *testing.T) {
	got := priorityOrder(t, "urgent", seqkafka.WithPriorityHeader("urgent"))
	require.Equal(t, []int64{0, 3, 1, 2}, got)
}

// Any producer can set a header: without WithPriorityHeader, none (not even
// DefaultPriorityHeader) lets a record jump its key's queue.
func TestPriorityHeaderIsIgnoredUnlessTurnedOn(t *testing.T) {
	got := priorityOrder(t, seqkafka.DefaultPriorityHeader)
	require.Equal(t, []int64{0, 1, 2, 3}, got, "a record carrying %s: high jumped its key's queue", seqkafka.DefaultPriorityHeader)
}

// priorityOrder produces a record of one key and holds it in its handler,
// then produces three more, the last carrying header "high", and returns the
// order in which the four ran once all are taken. The first is produced
// alone because a task starts only when its session's goroutine runs it: a
// High record taken with it would go first.
func priorityOrder(t *testing.T, header string, opts ...seqkafka.Option) []int64 {
	t.Helper()
	c := cluster(t, 1)
	high := rec(0, "a", "3")
	high.Headers = []kgo.RecordHeader{{Key: header, Value: []byte("HIGH")}}
	produce(t, c, []*kgo.Record{rec(0, "a", "0")})
	st := newStore()
	g := newGate()
	var order []int64 // one key: handlers never overlap
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if r.Offset == 0 {
			if err := g.wait(ctx, 0); err != nil {
				return err
			}
		}
		order = append(order, r.Offset)
		st.apply(r)
		return nil
	}, opts...)
	require.NoError(t, err)
	m := startMember(t, cons)
	<-g.entered
	produce(t, c, []*kgo.Record{rec(0, "a", "1"), rec(0, "a", "2"), high})
	require.Eventually(t, func() bool { return cons.Stats().Buffered == 4 }, 10*time.Second, time.Millisecond)
	close(g.open)
	<-st.at(4)
	require.NoError(t, m.close(t, 10*time.Second))
	return order
}

func TestBackoffBlocksOnlyItsKeyAndHoldsNoSlot(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "fails"), rec(0, "a", "after"), rec(0, "b", "other")})
	st := newStore()
	failed := make(chan struct{})
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if string(r.Value) == "fails" {
			close(failed) // runs once: the retry waits an hour
			return errors.New("transient")
		}
		st.apply(r)
		return nil
	},
		seqkafka.WithMaxConcurrency(1), // b can only run if a's backoff lends the one slot
		seqkafka.WithRetries(2, fixedBackoff(time.Hour)))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-failed
	select {
	case <-st.at(1):
	case <-time.After(20 * time.Second):
		t.Fatal("b's record did not run while a backs off: the backoff holds the slot")
	}
	require.True(t, st.isApplied(0, 2), "b's record ran while a backs off")
	require.False(t, st.isApplied(0, 1), "a's next record ran before a's retry")
	require.ErrorIs(t, m.close(t, 200*time.Millisecond), context.DeadlineExceeded)
	require.Equal(t, uint64(1), cons.Stats().Retries)
}
