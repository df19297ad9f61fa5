package seqkafka_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seqsched/seqsched/seqkafka"
)

// doneAboveStuck produces 10 records to partition 0 of c and runs a first
// owner that finishes offsets 1..9 while offset 0 is stuck, then closes
// it: the group's commit is offset 0, with 1..9 done in its metadata.
func doneAboveStuck(t *testing.T, c *kfake.Cluster) (*store, *commits) {
	t.Helper()
	rs := []*kgo.Record{rec(0, "slow", "0")}
	for i := 1; i < 10; i++ {
		rs = append(rs, rec(0, "k"+string(rune('0'+i)), ""))
	}
	produce(t, c, rs)
	st := newStore()
	w := watchCommits(c)
	a, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if r.Offset == 0 {
			<-ctx.Done()
			return ctx.Err()
		}
		st.apply(r)
		return nil
	}, seqkafka.WithCommitInterval(time.Hour), seqkafka.WithRetries(1, nil))
	require.NoError(t, err)
	ma := startMember(t, a)
	<-st.at(9)
	require.ErrorIs(t, ma.close(t, 100*time.Millisecond), context.DeadlineExceeded)
	return st, w
}

// Defect 1: an owner that commits before it has fetched the done ranges it
// inherited (here it is held by backpressure at the stuck offset) must keep
// them in its commits, or the next owner replays records already done.
func TestNewOwnerKeepsTheDoneRangesItInherited(t *testing.T) {
	c := cluster(t, 1)
	st, w := doneAboveStuck(t, c)

	// The second owner takes one record at a time: it holds offset 0 and
	// fetches nothing more, and commits every 10ms and at Close.
	entered := make(chan struct{}, 1)
	b, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		entered <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, seqkafka.WithMaxBuffered(1, 0), seqkafka.WithCommitInterval(10*time.Millisecond), seqkafka.WithRetries(1, nil))
	require.NoError(t, err)
	mb := startMember(t, b)
	<-entered
	time.Sleep(50 * time.Millisecond) // let the commit loop tick: a commit, if it erases, happens now
	require.ErrorIs(t, mb.close(t, 100*time.Millisecond), context.DeadlineExceeded)
	for _, s := range w.all() {
		_, done, err := seqkafka.DecodeMetadata(s.meta)
		require.NoError(t, err, "commit %+v dropped the inherited ranges", s)
		require.Equal(t, []seqkafka.OffsetRange{{From: 1, To: 10}}, done)
	}

	// The third owner replays only offset 0.
	var mu sync.Mutex
	var got []int64
	cc, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		mu.Lock()
		got = append(got, r.Offset)
		mu.Unlock()
		st.apply(r)
		return nil
	})
	require.NoError(t, err)
	mc := startMember(t, cc)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return uint64(len(got))+cc.Stats().Skipped >= 10
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, mc.close(t, 10*time.Second))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{0}, got, "records the first owner finished were replayed")
}

// Defect 3: the buffer bound is per partition, so a partition stuck
// behind one key never stops another from being consumed.
func TestStuckPartitionDoesNotStallTheOthers(t *testing.T) {
	c := cluster(t, 2)
	var stuck []*kgo.Record
	for i := 0; i < 30; i++ {
		stuck = append(stuck, rec(0, "poison", ""))
	}
	produce(t, c, stuck)
	st := newStore()
	entered := make(chan struct{}, 1)
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if string(r.Key) == "poison" {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		}
		st.apply(r)
		return nil
	}, seqkafka.WithMaxBuffered(10, 5), seqkafka.WithRetries(1, nil))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-entered
	require.Eventually(t, func() bool { return cons.Stats().Buffered >= 9 }, 10*time.Second, time.Millisecond,
		"partition 0 did not fill its buffer")

	produce(t, c, keyedOn(1, 20))
	select {
	case <-st.at(20):
	case <-time.After(15 * time.Second):
		t.Fatalf("partition 1 handled %d of 20 records while partition 0 was stuck", st.count())
	}
	require.ErrorIs(t, m.close(t, 200*time.Millisecond), context.DeadlineExceeded)
}

// keyedOn returns n records with distinct keys on partition part.
func keyedOn(part int32, n int) []*kgo.Record {
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = rec(part, "key"+string(rune('A'+i%26))+string(rune('a'+i/26)), "")
	}
	return rs
}

// A backoff function that panics is logged at Error and DefaultBackoff
// gives that wait: the record still gets all its attempts, ends in the
// dead-letter step in its key's order, and the partition's commit moves on.
func TestPanickingBackoffIsLoggedAndDefaultBackoffUsed(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "fails"), rec(0, "a", "after")})
	st := newStore()
	w := watchCommits(c)
	var calls atomic.Int32
	dead := make(chan error, 1)
	var logged atomic.Int32
	logger := slog.New(&funcHandler{handle: func(ctx context.Context, r slog.Record) error {
		if r.Level == slog.LevelError && strings.Contains(r.Message, "backoff function failed; DefaultBackoff used") {
			logged.Add(1)
		}
		return nil
	}})
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if string(r.Value) == "fails" {
			calls.Add(1)
			return errors.New("always fails")
		}
		select {
		case e := <-dead:
			dead <- e
		default:
			t.Errorf("record %d ran before its key's earlier record was dead-lettered", r.Offset)
		}
		st.apply(r)
		return nil
	}, seqkafka.WithRetries(3, func(context.Context, *kgo.Record, int, error) time.Duration { panic("backoff bug") }),
		seqkafka.WithCommitInterval(10*time.Millisecond),
		seqkafka.WithLogger(logger),
		seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
			dead <- err
			return nil
		}))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(1)
	require.Eventually(t, func() bool {
		s := w.all()
		return len(s) > 0 && s[len(s)-1].offset == 2
	}, 10*time.Second, time.Millisecond, "the commit did not move past the record")
	require.NoError(t, m.close(t, 10*time.Second))
	require.EqualError(t, <-dead, "always fails", "the dead-letter step gets the handler's error")
	require.Equal(t, int32(3), calls.Load(), "the handler ran every attempt")
	require.Equal(t, int32(2), logged.Load(), "each failed backoff logged")
}

// rejectCommits makes the cluster answer OffsetCommit with code for every
// partition whose metadata is longer than limit (or every partition, for
// limit < 0), and records the commits it accepted.
type rejectCommits struct {
	mu       sync.Mutex
	limit    int
	code     int16
	accepted []commitSeen
	rejected int
}

func rejectOn(c interface {
	ControlKey(int16, func(kmsg.Request) (kmsg.Response, error, bool))
	KeepControl()
}, limit int, code int16) *rejectCommits {
	rc := &rejectCommits{limit: limit, code: code}
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetCommitRequest)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		reject := false
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				meta := ""
				if p.Metadata != nil {
					meta = *p.Metadata
				}
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition = p.Partition
				if rc.limit < 0 || len(meta) > rc.limit {
					rp.ErrorCode = rc.code
					reject = true
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		if !reject {
			for _, t := range req.Topics {
				for _, p := range t.Partitions {
					meta := ""
					if p.Metadata != nil {
						meta = *p.Metadata
					}
					rc.accepted = append(rc.accepted, commitSeen{p.Partition, p.Offset, meta})
				}
			}
			return nil, nil, false // the cluster applies it
		}
		rc.rejected++
		resp.Version = req.Version
		return resp, nil, true
	})
	return rc
}

func (rc *rejectCommits) snapshot() ([]commitSeen, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]commitSeen(nil), rc.accepted...), rc.rejected
}

// manyRanges returns records on partition 0: offset 0 and every even
// offset are of key "stuck" (so never done while 0 blocks), odd offsets
// of distinct keys: n/2 separate done ranges.
func manyRanges(n int) []*kgo.Record {
	rs := make([]*kgo.Record, n)
	for i := range rs {
		if i%2 == 0 {
			rs[i] = rec(0, "stuck", "")
		} else {
			rs[i] = rec(0, "k"+string(rune(i)), "")
		}
	}
	return rs
}

// Defect 5: a broker whose offset.metadata.max.bytes is below 4,096
// answers OFFSET_METADATA_TOO_LARGE; the consumer shrinks its metadata
// (dropping the highest ranges) and commits again.
func TestCommitShrinksMetadataTheBrokerRefuses(t *testing.T) {
	c := cluster(t, 1)
	const n, limit = 1200, 100
	produce(t, c, manyRanges(n))
	rc := rejectOn(c, limit, kerr.OffsetMetadataTooLarge.Code)
	st := newStore()
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if string(r.Key) == "stuck" {
			<-ctx.Done()
			return ctx.Err()
		}
		st.apply(r)
		return nil
	}, seqkafka.WithCommitInterval(10*time.Millisecond), seqkafka.WithMaxBuffered(5000, 2500), seqkafka.WithRetries(1, nil))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(n / 2) // distinct records: a handler call may be a replay
	require.Eventually(t, func() bool {
		acc, _ := rc.snapshot()
		return len(acc) > 0 && acc[len(acc)-1].meta != ""
	}, 10*time.Second, time.Millisecond, "no commit with metadata was accepted")
	require.ErrorIs(t, m.close(t, 200*time.Millisecond), context.DeadlineExceeded)
	acc, rejected := rc.snapshot()
	require.NotZero(t, rejected, "the broker never refused: the test proves nothing")
	last := acc[len(acc)-1]
	require.LessOrEqual(t, len(last.meta), limit)
	wm, ranges, err := seqkafka.DecodeMetadata(last.meta)
	require.NoError(t, err)
	require.Equal(t, int64(0), wm)
	require.Equal(t, seqkafka.OffsetRange{From: 1, To: 2}, ranges[0], "the lowest ranges are kept")
}

// Defect 6: Close reports a final commit the broker refused.
func TestCloseReturnsItsRefusedFinalCommit(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", ""), rec(0, "b", "")})
	st := newStore()
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		st.apply(r)
		return nil
	}, seqkafka.WithCommitInterval(time.Hour))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(2)
	rejectOn(c, -1, kerr.InvalidCommitOffsetSize.Code)
	err = m.close(t, 10*time.Second)
	require.ErrorIs(t, err, kerr.InvalidCommitOffsetSize)
	require.ErrorContains(t, err, "t[0]", "the error names the partition")
}

// Defect 7: autocommit options in the client options are overridden, as
// the doc says, instead of making NewConsumer fail.
func TestAutoCommitOptionsAreOverridden(t *testing.T) {
	for name, opt := range map[string]kgo.Opt{
		"AutoCommitMarks":  kgo.AutoCommitMarks(),
		"GreedyAutoCommit": kgo.GreedyAutoCommit(),
	} {
		t.Run(name, func(t *testing.T) {
			c := cluster(t, 1)
			produce(t, c, []*kgo.Record{rec(0, "a", "")})
			w := watchCommits(c)
			st := newStore()
			cons, err := seqkafka.NewConsumer(groupOpts(c, opt, kgo.AutoCommitInterval(100*time.Millisecond)),
				func(ctx context.Context, r *kgo.Record) error {
					st.apply(r)
					return nil
				}, seqkafka.WithCommitInterval(time.Hour))
			require.NoError(t, err)
			m := startMember(t, cons)
			<-st.at(1)
			time.Sleep(300 * time.Millisecond) // three autocommit intervals, were autocommit on
			require.NoError(t, m.close(t, 10*time.Second))
			require.Len(t, w.all(), 1, "only the consumer's own final commit: %v", w.all())
		})
	}
}

// By default a record dropped after its last attempt is logged at Error to
// slog.Default, where it is seen.
func TestDroppedRecordIsLoggedToSlogDefault(t *testing.T) {
	logs := newLogSink()
	prev := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(prev) })

	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "bad")})
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(context.Context, *kgo.Record) error {
		return errors.New("cannot parse")
	}, seqkafka.WithRetries(1, nil))
	require.NoError(t, err)
	m := startMember(t, cons)
	select {
	case <-logs.when("ERROR seqkafka: record failed every attempt; dropped"):
	case <-time.After(10 * time.Second):
		t.Fatal("the dropped record was not logged to slog.Default")
	}
	require.NoError(t, m.close(t, 10*time.Second))
}

func TestWithMaxMetadataBytesBoundsTheMetadata(t *testing.T) {
	c := cluster(t, 1)
	const n, limit = 400, 60
	produce(t, c, manyRanges(n))
	w := watchCommits(c)
	var done sync.WaitGroup
	done.Add(n / 2)
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if string(r.Key) == "stuck" {
			<-ctx.Done()
			return ctx.Err()
		}
		done.Done()
		return nil
	}, seqkafka.WithMaxMetadataBytes(limit), seqkafka.WithCommitInterval(time.Hour), seqkafka.WithRetries(1, nil))
	require.NoError(t, err)
	m := startMember(t, cons)
	done.Wait()
	require.ErrorIs(t, m.close(t, 200*time.Millisecond), context.DeadlineExceeded)
	seen := w.all()
	require.Len(t, seen, 1, "one commit, at Close")
	require.LessOrEqual(t, len(seen[0].meta), limit)
	wm, ranges, err := seqkafka.DecodeMetadata(seen[0].meta)
	require.NoError(t, err)
	require.Equal(t, int64(0), wm)
	require.NotEmpty(t, ranges)
	require.Equal(t, seqkafka.OffsetRange{From: 1, To: 2}, ranges[0], "the lowest ranges are kept")
}
