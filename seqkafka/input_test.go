package seqkafka_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqkafka"
)

func nop(context.Context, *kgo.Record) error { return nil }

func TestNewConsumerRejectsBadInput(t *testing.T) {
	c := cluster(t, 1)
	_, err := seqkafka.NewConsumer(groupOpts(c), nil)
	require.ErrorIs(t, err, seqkafka.ErrNilHandler)

	_, err = seqkafka.NewConsumer([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("t")}, nop)
	require.ErrorIs(t, err, seqkafka.ErrNoGroup, "no group")
	_, err = seqkafka.NewConsumer([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("g")}, nop)
	require.ErrorIs(t, err, seqkafka.ErrNoGroup, "no topics")
	_, err = seqkafka.NewConsumer(nil, nop)
	require.ErrorIs(t, err, seqkafka.ErrNoGroup, "no client options")

	bad := []seqkafka.Option{
		seqkafka.WithMaxConcurrency(0),
		seqkafka.WithMaxBuffered(10, 10),
		seqkafka.WithMaxBuffered(0, 0),
		seqkafka.WithRetries(0, nil),
		seqkafka.WithDeadLetter(nil),
		seqkafka.WithPriorityHeader(""),
		seqkafka.WithDrainTimeout(0),
		seqkafka.WithCommitInterval(-time.Second),
		seqkafka.WithCommitTimeout(0),
		seqkafka.WithLogger(nil),
		seqkafka.WithMaxMetadataBytes(-1),
		seqkafka.WithBatch(0, time.Millisecond),
		seqkafka.WithInterceptor(nil),
		nil,
	}
	for _, o := range bad {
		_, err := seqkafka.NewConsumer(groupOpts(c), nop, o)
		require.ErrorIs(t, err, seqkafka.ErrInvalidOption, "%v", o)
		var oe *seqkafka.OptionError
		require.True(t, errors.As(err, &oe), "%v: %T is not an *OptionError", o, err)
	}
	_, err = seqkafka.NewConsumer(groupOpts(c), nop, seqkafka.WithMaxConcurrency(-1))
	require.EqualError(t, err, "seqkafka: WithMaxConcurrency(-1): must be >= 1: invalid option")

	_, err = seqkafka.DeadLetterTopic(nil, "dlq")
	require.ErrorIs(t, err, seqkafka.ErrInvalidOption)
}

func TestRunAndCloseRejectNilContextAndRunAfterClose(t *testing.T) {
	c := cluster(t, 1)
	cons, err := seqkafka.NewConsumer(groupOpts(c), nop)
	require.NoError(t, err)
	//lint:ignore SA1012 testing the nil check
	require.ErrorIs(t, cons.Run(nil), seqkafka.ErrNilContext) //nolint:staticcheck
	//lint:ignore SA1012 testing the nil check
	require.ErrorIs(t, cons.Close(nil), seqkafka.ErrNilContext) //nolint:staticcheck
	require.NoError(t, cons.Close(context.Background()))
	require.ErrorIs(t, cons.Run(context.Background()), seqkafka.ErrClosed)
	require.NoError(t, cons.Close(context.Background()), "second Close")
}

// Close of a member cut off from the brokers cannot leave the group: it
// says so in its error, for its caller to decide, rather than in a log
// line.
func TestCloseReturnsTheLeaveGroupError(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "1")})
	st := newStore()
	d := &killableDialer{}
	cons, err := seqkafka.NewConsumer(groupOpts(c, kgo.Dialer(d.dial)), func(ctx context.Context, r *kgo.Record) error {
		st.apply(r)
		return nil
	}, seqkafka.WithCommitTimeout(time.Second))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(1)
	d.kill()
	err = m.close(t, 10*time.Second)
	require.ErrorIs(t, err, errKilled)
	require.ErrorContains(t, err, "seqkafka: leave group: ")
}

// A second Run while one is in progress returns ErrRunning, and leaves the
// first running.
func TestSecondRunReturnsErrRunning(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "1"), rec(0, "a", "2")})
	st := newStore()
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		st.apply(r)
		return nil
	})
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(1) // the first Run is running
	require.ErrorIs(t, cons.Run(context.Background()), seqkafka.ErrRunning)
	<-st.at(2)
	require.NoError(t, m.close(t, 10*time.Second))
}

// A Close at once after Run has begun stops that Run, which returns nil:
// Run returns ErrClosed only when Close had begun first.
func TestCloseRightAfterRunBeganEndsItWithNil(t *testing.T) {
	c := cluster(t, 1)
	cons, err := seqkafka.NewConsumer(groupOpts(c), nop)
	require.NoError(t, err)
	m := startMember(t, cons) // returns once Run has begun
	require.NoError(t, m.close(t, 10*time.Second))
	require.NoError(t, m.err, "Run after a Close during it")
}

func TestHandlerPanicIsAFailedAttempt(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "once"), rec(0, "a", "always"), rec(0, "a", "fine")})
	st := newStore()
	attempts := map[string]int{}
	dead := make(chan error, 1)
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		v := string(r.Value)
		attempts[v]++ // one key: never concurrent
		if v == "always" || (v == "once" && attempts[v] == 1) {
			panic("boom " + v)
		}
		st.apply(r)
		return nil
	}, seqkafka.WithRetries(2, fixedBackoff(0)),
		seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
			dead <- err
			st.apply(r)
			return nil
		}))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(3)
	require.NoError(t, m.close(t, 10*time.Second))
	err = <-dead
	var pe *seqsched.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "boom always", pe.Value)
	require.Contains(t, string(pe.Stack), "panic")
	s := cons.Stats()
	require.Equal(t, uint64(2), s.Processed)
	require.Equal(t, uint64(2), s.Retries, "one retry each for once and always")
	require.Equal(t, uint64(1), s.DeadLettered)
	require.Equal(t, map[string]int{"once": 2, "always": 2, "fine": 1}, attempts)
}

// A handler that calls runtime.Goexit (t.FailNow in a test) is a failed
// attempt, like a panic: the record is retried, then dead-lettered, in its
// key's order; a dead-letter function that calls Goexit has failed, and is
// called again. Either way the partition's commit moves past the record.
func TestHandlerGoexitIsAFailedAttempt(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "once"), rec(0, "a", "always"), rec(0, "a", "fine"), rec(0, "b", "dlq-exits")})
	st := newStore()
	attempts := map[string]int{}
	var mu sync.Mutex
	dead := make(chan error, 2)
	dlqExits := 0
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		v := string(r.Value)
		mu.Lock()
		attempts[v]++
		n := attempts[v]
		mu.Unlock()
		if v == "always" || v == "dlq-exits" || (v == "once" && n == 1) {
			runtime.Goexit()
		}
		st.apply(r)
		return nil
	}, seqkafka.WithRetries(2, fixedBackoff(0)),
		seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
			if string(r.Value) == "dlq-exits" {
				if dlqExits++; dlqExits == 1 { // one key: never concurrent
					runtime.Goexit()
				}
				st.apply(r)
				return nil
			}
			dead <- err
			st.apply(r)
			return nil
		}))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(4)
	// Every record ends done: the commit can move past all four. (The
	// timeout turns a record left undone into a report.)
	require.Eventually(t, func() bool {
		s := cons.Stats()
		if s.Processed != 2 || len(s.Partitions) == 0 {
			return false
		}
		for _, ps := range s.Partitions {
			if ps.Buffered != 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "a record whose handler called Goexit was left undone")
	require.NoError(t, m.close(t, 10*time.Second))
	require.ErrorIs(t, <-dead, seqsched.ErrGoexit)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"once": 2, "always": 2, "fine": 1, "dlq-exits": 2}, attempts)
	require.Equal(t, 2, dlqExits, "the dead-letter function that called Goexit was called again")
	require.Equal(t, uint64(2), cons.Stats().DeadLettered)
}

// A key is the producer's: no log record holds it (log lines name the
// topic, partition and offset), so a key with a line break forges no line
// and a long key makes no record long.
func TestLogRecordsNeverHoldAProducersKey(t *testing.T) {
	c := cluster(t, 1)
	forged := rec(0, "k\nlevel=ERROR msg=forged", "v")
	long := rec(0, strings.Repeat("L", 1<<16), "v")
	produce(t, c, []*kgo.Record{forged, long})
	sink := newLogSink()
	var dlCalls sync.Map
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(context.Context, *kgo.Record) error {
		return errors.New("always fails")
	},
		seqkafka.WithRetries(2, fixedBackoff(0)),
		seqkafka.WithDeadLetter(func(_ context.Context, r *kgo.Record, _ int, err error) error {
			if _, again := dlCalls.LoadOrStore(r.Offset, true); !again {
				return errors.New("dead-letter step down") // logged, then retried
			}
			return nil
		}),
		seqkafka.WithLogger(sink.logger()))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-sink.when("offset=1")
	require.Eventually(t, func() bool { return cons.Stats().DeadLettered == 2 }, 10*time.Second, time.Millisecond)
	require.NoError(t, m.close(t, 10*time.Second))
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.NotEmpty(t, sink.msgs)
	for _, line := range sink.msgs {
		if strings.Contains(line, "forged") || strings.Contains(line, "LLLL") {
			t.Errorf("a log record holds a key: %.200q", line)
		}
	}
}
