package seqjetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqjetstream"
)

// Retries, backoffs and the dead-letter step: the tests kafka's
// retry_test.go has under the same names, for the same rules
// (docs/brokers.md).

func TestHandlerCtxTellsTheAttempt(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	var mu sync.Mutex
	seen := map[string][]int{}
	deadAttempt := make(chan [2]int, 1)
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		n := seqjetstream.Attempt(ctx)
		mu.Lock()
		seen[string(m.Data())] = append(seen[string(m.Data())], n)
		mu.Unlock()
		if string(m.Data()) == "poison" || n < 3 {
			return errors.New("not yet")
		}
		return nil
	}, seqjetstream.WithRetries(3, fast),
		seqjetstream.WithDeadLetter(func(ctx context.Context, m jetstream.Msg, attempts int, err error) error {
			deadAttempt <- [2]int{seqjetstream.Attempt(ctx), attempts}
			return nil
		}))
	start(t, c)
	publish(t, f.js, "k.a", "twice")
	publish(t, f.js, "k.b", "poison")
	assert.Equal(t, [2]int{3, 3}, <-deadAttempt, "Attempt(ctx) and attempts in the dead-letter function")
	eventually(t, func() bool { st := c.Stats(); return st.Acked == 1 && st.Termed == 1 }, "%+v", statsOf(c))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string][]int{"twice": {1, 2, 3}, "poison": {1, 2, 3}}, seen)
	assert.Zero(t, seqjetstream.Attempt(context.Background()))
}

// The backoff is asked after each failed attempt but the last, and after
// each failure of the dead-letter function, with the attempt counting on.
func TestBackoffSeesTheAttemptAndTheError(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	var mu sync.Mutex
	var calls []string
	dlFails := 0
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		return fmt.Errorf("e%d", seqjetstream.Attempt(ctx))
	}, seqjetstream.WithRetries(3, func(ctx context.Context, m jetstream.Msg, attempt int, err error) time.Duration {
		mu.Lock()
		calls = append(calls, fmt.Sprintf("%s: attempt %d: %v", m.Subject(), attempt, err))
		mu.Unlock()
		return time.Millisecond
	}),
		seqjetstream.WithLogger(discard),
		seqjetstream.WithDeadLetter(func(ctx context.Context, m jetstream.Msg, attempts int, err error) error {
			if dlFails++; dlFails == 1 { // one message: never concurrent
				return errors.New("dlq down")
			}
			return nil
		}))
	start(t, c)
	publish(t, f.js, "k.a", "x")
	eventually(t, func() bool { return c.Stats().DeadLettered == 1 }, "dead-lettered: %+v", statsOf(c))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{
		"k.a: attempt 1: e1",
		"k.a: attempt 2: e2",
		"k.a: attempt 4: dlq down", // the dead-letter function's first failure: attempts + 1
	}, calls)
}

// A dead-letter function that fails is called again after the backoff,
// however many times, until it succeeds: the message is terminated only
// then, and its key's next message waits for it.
func TestFailingDeadLetterIsRetriedUntilItSucceeds(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	l := newLedger()
	var dlCalls atomic.Int32
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		if string(m.Data()) == "poison" {
			return errors.New("cannot parse")
		}
		if n := dlCalls.Load(); n != 6 {
			t.Errorf("after ran with the dead-letter function called %d times; want 6", n)
		}
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	}, seqjetstream.WithRetries(2, fast),
		seqjetstream.WithLogger(discard),
		seqjetstream.WithDeadLetter(func(ctx context.Context, m jetstream.Msg, attempts int, err error) error {
			if dlCalls.Add(1) <= 5 { // more failures than attempts
				return errors.New("dlq down")
			}
			return nil
		}))
	start(t, c)
	publish(t, f.js, "k.a", "poison")
	publish(t, f.js, "k.a", "after")
	eventually(t, func() bool { st := c.Stats(); return st.Acked == 1 && st.Termed == 1 }, "%+v", statsOf(c))
	assert.Equal(t, int32(6), dlCalls.Load())
	assert.Equal(t, uint64(1), c.Stats().DeadLettered)
	assert.Equal(t, []uint64{2}, l.key("k.a"))
}

// A backoff function that panics is logged at Error and DefaultBackoff
// gives that wait: the message still gets all its attempts and ends in
// the dead-letter step, in its key's order.
func TestPanickingBackoffIsLoggedAndDefaultBackoffUsed(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	l := newLedger()
	var calls, logged atomic.Int32
	dead := make(chan error, 1)
	logger := slog.New(funcHandler(func(r slog.Record) {
		if r.Level == slog.LevelError && strings.Contains(r.Message, "backoff function failed; DefaultBackoff used") {
			logged.Add(1)
		}
	}))
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		if string(m.Data()) == "fails" {
			calls.Add(1)
			return errors.New("always fails")
		}
		select {
		case e := <-dead:
			dead <- e
		default:
			t.Errorf("message %d ran before its key's earlier message was dead-lettered", seqOf(t, m))
		}
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	}, seqjetstream.WithRetries(3, func(context.Context, jetstream.Msg, int, error) time.Duration { panic("backoff bug") }),
		seqjetstream.WithLogger(logger),
		seqjetstream.WithDeadLetter(func(ctx context.Context, m jetstream.Msg, attempts int, err error) error {
			dead <- err
			return nil
		}))
	start(t, c)
	publish(t, f.js, "k.a", "fails")
	publish(t, f.js, "k.a", "after")
	eventually(t, func() bool { return len(l.key("k.a")) == 1 }, "after applied: %+v", statsOf(c))
	require.EqualError(t, <-dead, "always fails", "the dead-letter step gets the handler's error")
	assert.Equal(t, int32(3), calls.Load(), "the handler ran every attempt")
	assert.Equal(t, int32(2), logged.Load(), "each failed backoff logged")
}

// funcHandler is a slog.Handler enabled at every level that calls f.
type funcHandler func(slog.Record)

func (h funcHandler) Enabled(context.Context, slog.Level) bool      { return true }
func (h funcHandler) Handle(_ context.Context, r slog.Record) error { h(r); return nil }
func (h funcHandler) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h funcHandler) WithGroup(string) slog.Handler                 { return h }
