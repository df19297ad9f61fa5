package seqkafka_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqsched/seqsched/seqkafka"
)

// batchLog records the batches a BatchHandler saw, as offsets.
type batchLog struct {
	mu      sync.Mutex
	batches [][]int64
	keys    [][]string
}

func (l *batchLog) add(rs []*kgo.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var offs []int64
	var keys []string
	for _, r := range rs {
		offs = append(offs, r.Offset)
		keys = append(keys, string(r.Key))
	}
	slices.Sort(offs)
	l.batches = append(l.batches, offs)
	l.keys = append(l.keys, keys)
}

func (l *batchLog) all() ([][]int64, [][]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.batches), slices.Clone(l.keys)
}

func TestBatchHoldsAtMostOneRecordPerKey(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{
		rec(0, "a", ""), rec(0, "b", ""), rec(0, "c", ""),
		rec(0, "a", ""), rec(0, "b", ""),
		rec(0, "a", ""),
	})
	st := newStore()
	var log batchLog
	cons, err := seqkafka.NewBatchConsumer(groupOpts(c), func(ctx context.Context, rs []*kgo.Record) error {
		log.add(rs)
		for _, r := range rs {
			st.apply(r)
		}
		return nil
	}, seqkafka.WithBatch(10, 300*time.Millisecond)) // time enough for a, b and c to join
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(6)
	require.NoError(t, m.close(t, 10*time.Second))
	batches, keys := log.all()
	// Each key's next record waits for the batch holding its last one.
	require.Equal(t, [][]int64{{0, 1, 2}, {3, 4}, {5}}, batches)
	for i, ks := range keys {
		require.Len(t, ks, len(slices.Compact(slices.Sorted(slices.Values(ks)))), "batch %d repeats a key: %v", i, ks)
	}
	st.checkOrder(t)
	s := cons.Stats()
	require.Equal(t, uint64(6), s.Processed)
	require.Equal(t, uint64(3), s.HandlerTime.Count, "a batch is one handler call")
	require.Equal(t, uint64(6), s.QueueTime.Count, "queue time is per record")
}

func TestBatchIsHandedOverOnceFull(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, keyedOn(0, 6))
	st := newStore()
	var log batchLog
	cons, err := seqkafka.NewBatchConsumer(groupOpts(c), func(ctx context.Context, rs []*kgo.Record) error {
		log.add(rs)
		for _, r := range rs {
			st.apply(r)
		}
		return nil
	}, seqkafka.WithBatch(3, time.Hour)) // only a full batch can go
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(6)
	require.NoError(t, m.close(t, 10*time.Second))
	batches, _ := log.all()
	require.Len(t, batches, 2)
	for _, b := range batches {
		require.Len(t, b, 3)
	}
}

// A BatchError reports records one by one: a failed one is retried alone,
// a terminal one is dead-lettered at once, the others are done.
func TestBatchErrorReportsRecordsOneByOne(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "ok"), rec(0, "b", "retry"), rec(0, "c", "terminal")})
	st := newStore()
	var log batchLog
	var mu sync.Mutex
	attempts := map[string][]int{}
	dead := make(chan string, 2)
	cons, err := seqkafka.NewBatchConsumer(groupOpts(c), func(ctx context.Context, rs []*kgo.Record) error {
		log.add(rs)
		n := seqkafka.Attempt(ctx)
		errs := make([]error, len(rs))
		for i, r := range rs {
			v := string(r.Value)
			mu.Lock()
			attempts[v] = append(attempts[v], n)
			mu.Unlock()
			switch {
			case v == "retry" && n == 1:
				errs[i] = errors.New("transient")
			case v == "terminal":
				errs[i] = seqkafka.Terminal(errors.New("bad"))
			default:
				st.apply(r)
			}
		}
		if len(rs) == 1 && string(rs[0].Value) == "whole" && n == 1 {
			return errors.New("the whole batch failed") // also fails a batch of one
		}
		return &seqkafka.BatchError{Errs: errs}
	}, seqkafka.WithBatch(3, 20*time.Millisecond), seqkafka.WithRetries(3, fixedBackoff(0)),
		seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
			dead <- string(r.Value) + ": " + err.Error()
			st.apply(r)
			return nil
		}))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(3) // ok, retry (on its second attempt), terminal (dead-lettered)
	require.Equal(t, "terminal: bad", <-dead)
	produce(t, c, []*kgo.Record{rec(0, "d", "whole")})
	<-st.at(4)
	require.NoError(t, m.close(t, 10*time.Second))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string][]int{
		"ok": {1}, "retry": {1, 2}, "terminal": {1},
		"whole": {1, 2}, // failed as a whole, then retried alone
	}, attempts)
	s := cons.Stats()
	require.Equal(t, uint64(3), s.Processed)
	require.Equal(t, uint64(2), s.Retries)
	require.Equal(t, uint64(1), s.DeadLettered)
}

func TestNewConsumerRejectsWithBatch(t *testing.T) {
	c := cluster(t, 1)
	_, err := seqkafka.NewConsumer(groupOpts(c), nop, seqkafka.WithBatch(10, time.Millisecond))
	require.ErrorIs(t, err, seqkafka.ErrInvalidOption)
	_, err = seqkafka.NewBatchConsumer(groupOpts(c), nil)
	require.ErrorIs(t, err, seqkafka.ErrNilHandler)
	for _, o := range []seqkafka.Option{seqkafka.WithBatch(0, 0), seqkafka.WithBatch(1, -1)} {
		_, err = seqkafka.NewBatchConsumer(groupOpts(c), func(context.Context, []*kgo.Record) error { return nil }, o)
		require.ErrorIs(t, err, seqkafka.ErrInvalidOption, "%v", o)
	}
}
