package seqkafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqsched/seqsched/seqkafka"
)

func TestDeadLetterTopicProducesTheRecordWithTheError(t *testing.T) {
	c := cluster(t, 1, kfake.SeedTopics(1, "dlq"))
	bad := rec(0, "a", "poison")
	bad.Headers = []kgo.RecordHeader{
		{Key: "trace", Value: []byte("x1")},
		// A producer's own header of one of DeadLetterTopic's names: the
		// copy must not carry it, or a reader of the dead-letter topic
		// taking the first of each name would see the producer's word.
		{Key: seqkafka.HeaderOffset, Value: []byte("999")},
	}
	produce(t, c, []*kgo.Record{bad, rec(0, "a", "ok")})
	producer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer producer.Close()
	dlq, err := seqkafka.DeadLetterTopic(producer, "dlq")
	require.NoError(t, err)
	_, err = seqkafka.DeadLetterTopic(producer, "")
	require.ErrorIs(t, err, seqkafka.ErrInvalidOption)

	st := newStore()
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if string(r.Value) == "poison" {
			return errors.New("cannot parse")
		}
		st.apply(r)
		return nil
	}, seqkafka.WithRetries(2, fixedBackoff(0)), seqkafka.WithDeadLetter(dlq))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(1) // "ok" runs only after "poison" was dead-lettered: same key
	require.NoError(t, m.close(t, 10*time.Second))
	require.Equal(t, uint64(1), cons.Stats().DeadLettered)

	reader, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer reader.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs := reader.PollRecords(ctx, 1)
	require.NoError(t, fs.Err0())
	got := fs.Records()
	require.Len(t, got, 1)
	require.Equal(t, "a", string(got[0].Key))
	require.Equal(t, "poison", string(got[0].Value))
	var headers []string
	for _, h := range got[0].Headers {
		headers = append(headers, h.Key+"="+string(h.Value))
	}
	require.Equal(t, []string{
		"trace=x1",
		seqkafka.HeaderError + "=cannot parse",
		seqkafka.HeaderTopic + "=t",
		seqkafka.HeaderPartition + "=0",
		seqkafka.HeaderOffset + "=0",
		seqkafka.HeaderAttempts + "=2",
	}, headers)
}

func TestUnorderedNoKeyRecordsDoNotWaitForEachOther(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "", "0"), rec(0, "", "1")})
	st := newStore()
	g := newGate()
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if r.Offset == 0 {
			if err := g.wait(ctx, 0); err != nil {
				return err
			}
		}
		st.apply(r)
		return nil
	}, seqkafka.WithUnorderedNoKey())
	require.NoError(t, err)
	m := startMember(t, cons)
	<-g.entered
	<-st.at(1) // offset 1 done while offset 0 is still held
	require.False(t, st.isApplied(0, 0))
	close(g.open)
	<-st.at(2)
	require.NoError(t, m.close(t, 10*time.Second))
}
