package seqkafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqsched/seqsched/seqkafka"
)

func TestTerminalErrorSkipsTheRetries(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "bad schema"), rec(0, "a", "fine")})
	st := newStore()
	var mu sync.Mutex
	calls := map[string]int{}
	dead := make(chan error, 1)
	var deadAttempt int
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		mu.Lock()
		calls[string(r.Value)]++
		mu.Unlock()
		if string(r.Value) == "bad schema" {
			return seqkafka.Terminal(errors.New("cannot decode"))
		}
		st.apply(r)
		return nil
	}, seqkafka.WithRetries(5, fixedBackoff(0)),
		seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
			deadAttempt = seqkafka.Attempt(ctx)
			dead <- err
			return nil
		}))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(1)
	require.NoError(t, m.close(t, 10*time.Second))
	err = <-dead
	require.ErrorIs(t, err, seqkafka.ErrTerminal)
	require.EqualError(t, err, "cannot decode", "Terminal keeps the error's text")
	require.Equal(t, 1, deadAttempt, "dead-lettered after one attempt")
	require.Equal(t, map[string]int{"bad schema": 1, "fine": 1}, calls)
	require.Equal(t, uint64(0), cons.Stats().Retries)
	require.NoError(t, seqkafka.Terminal(nil))
}

func TestHandlerCtxTellsTheAttempt(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "twice"), rec(0, "b", "poison")})
	st := newStore()
	var mu sync.Mutex
	seen := map[string][]int{}
	var deadAttempt int
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		n := seqkafka.Attempt(ctx)
		mu.Lock()
		seen[string(r.Value)] = append(seen[string(r.Value)], n)
		mu.Unlock()
		if string(r.Value) == "poison" || n < 3 {
			return errors.New("not yet")
		}
		st.apply(r)
		return nil
	}, seqkafka.WithRetries(3, fixedBackoff(0)),
		seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
			deadAttempt = seqkafka.Attempt(ctx)
			st.apply(r)
			return nil
		}))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(2)
	require.NoError(t, m.close(t, 10*time.Second))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string][]int{"twice": {1, 2, 3}, "poison": {1, 2, 3}}, seen)
	require.Equal(t, 3, deadAttempt)
	require.Zero(t, seqkafka.Attempt(context.Background()))
}

// The backoff is asked after each failed attempt but the last, and after
// each failure of the dead-letter function, with the attempt counting on.
func TestBackoffSeesTheAttemptAndTheError(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "x")})
	st := newStore()
	var mu sync.Mutex
	var calls []string
	dlFails := 0
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		return fmt.Errorf("e%d", seqkafka.Attempt(ctx))
	}, seqkafka.WithRetries(3, func(ctx context.Context, r *kgo.Record, attempt int, err error) time.Duration {
		mu.Lock()
		calls = append(calls, fmt.Sprintf("%s/%d: attempt %d: %v", r.Topic, r.Offset, attempt, err))
		mu.Unlock()
		return time.Millisecond
	}),
		seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
			if dlFails++; dlFails == 1 {
				return errors.New("dlq down")
			}
			st.apply(r)
			return nil
		}))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(1)
	require.NoError(t, m.close(t, 10*time.Second))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{
		"t/0: attempt 1: e1",
		"t/0: attempt 2: e2",
		"t/0: attempt 4: dlq down", // the dead-letter function's first failure: attempts + 1
	}, calls)
}

// A dead-letter function that fails is called again after the backoff,
// however many times, until it succeeds: the record is never committed
// past without it, and its key's next record waits for it.
func TestFailingDeadLetterIsRetriedUntilItSucceeds(t *testing.T) {
	c := cluster(t, 1)
	produce(t, c, []*kgo.Record{rec(0, "a", "poison"), rec(0, "a", "after")})
	st := newStore()
	w := watchCommits(c)
	var dlCalls atomic.Int32
	cons, err := seqkafka.NewConsumer(groupOpts(c), func(ctx context.Context, r *kgo.Record) error {
		if string(r.Value) == "poison" {
			return errors.New("cannot parse")
		}
		if dlCalls.Load() != 6 {
			t.Errorf("after ran with the dead-letter function called %d times; want 6", dlCalls.Load())
		}
		st.apply(r)
		return nil
	}, seqkafka.WithRetries(2, fixedBackoff(0)),
		seqkafka.WithCommitInterval(10*time.Millisecond),
		seqkafka.WithLogger(slog.New(slog.DiscardHandler)),
		seqkafka.WithDeadLetter(func(ctx context.Context, r *kgo.Record, attempts int, err error) error {
			if dlCalls.Add(1) <= 5 { // more failures than attempts
				return errors.New("dlq down")
			}
			return nil
		}))
	require.NoError(t, err)
	m := startMember(t, cons)
	<-st.at(1)
	require.Eventually(t, func() bool {
		s := w.all()
		return len(s) > 0 && s[len(s)-1].offset == 2
	}, 10*time.Second, time.Millisecond, "the commit did not move past the records")
	require.NoError(t, m.close(t, 10*time.Second))
	require.Equal(t, int32(6), dlCalls.Load())
	require.Equal(t, uint64(1), cons.Stats().DeadLettered)
}
