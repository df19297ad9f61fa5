package seqjetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqjetstream"
)

// misbehave is what an injected callback does on its first call.
type misbehave int

const (
	panics misbehave = iota
	goexits
	closes // calls Close with the ctx it was given (or Background, for the key function)
)

func (b misbehave) String() string { return [...]string{"panics", "goexits", "closes"}[b] }

// do misbehaves; c is the consumer, ctx the callback's ctx (nil if none).
func (b misbehave) do(t *testing.T, c *atomic.Pointer[seqjetstream.Consumer], ctx context.Context) {
	switch b {
	case panics:
		panic(fmt.Sprint("injected ", b))
	case goexits:
		runtime.Goexit()
	case closes:
		if ctx == nil {
			ctx = context.Background()
		}
		err := c.Load().Close(ctx)
		if own := ctx != context.Background(); own != errors.Is(err, seqschedErrWouldDeadlock) {
			t.Errorf("Close from a callback (with its own ctx: %v) = %v", own, err)
		}
	}
}

// misbehavingLog is a slog handler that misbehaves on every record.
type misbehavingLog struct {
	t     *testing.T
	b     misbehave
	c     *atomic.Pointer[seqjetstream.Consumer]
	calls *atomic.Int32
}

func (h misbehavingLog) Enabled(context.Context, slog.Level) bool { return true }
func (h misbehavingLog) Handle(ctx context.Context, _ slog.Record) error {
	h.calls.Add(1)
	h.b.do(h.t, h.c, ctx)
	return nil
}
func (h misbehavingLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h misbehavingLog) WithGroup(string) slog.Handler      { return h }

// TestCallbacksThatPanicGoexitOrCloseLoseNothing injects, at each site
// where user code runs, a panic, a runtime.Goexit and a re-entrant Close:
// every message is still resolved (acked or terminated, exactly as the
// site's rule says), the key's next message still runs after it, and the
// consumer still closes, with no goroutine left behind.
func TestCallbacksThatPanicGoexitOrCloseLoseNothing(t *testing.T) {
	for _, site := range []string{"key", "handler", "backoff", "deadletter", "logger"} {
		for _, b := range []misbehave{panics, goexits, closes} {
			t.Run(site+"/"+b.String(), func(t *testing.T) { testCallback(t, site, b) })
		}
	}
}

func testCallback(t *testing.T, site string, b misbehave) {
	f := newFixture(t, jetstream.ConsumerConfig{AckWait: time.Minute})
	var cp atomic.Pointer[seqjetstream.Consumer]
	var fired, logs atomic.Int32
	first := func() bool { return fired.Add(1) == 1 } // misbehave once
	l := newLedger()

	handler := func(ctx context.Context, m jetstream.Msg) error {
		seq := seqOf(t, m)
		switch {
		case site == "handler" && seq == 1 && first():
			b.do(t, &cp, ctx)
			return errors.New("after a re-entrant Close")
		case (site == "backoff") && seq == 1 && seqjetstream.Attempt(ctx) == 1:
			return errors.New("fails once")
		case (site == "deadletter" || site == "logger") && seq == 1:
			return seqjetstream.Terminal(errors.New("poison"))
		}
		l.apply("k", seq)
		return nil
	}
	opts := []seqjetstream.Option{
		seqjetstream.WithRetries(3, func(ctx context.Context, m jetstream.Msg, attempt int, err error) time.Duration {
			if site == "backoff" && first() {
				b.do(t, &cp, ctx)
			}
			return time.Millisecond
		}),
		seqjetstream.WithLogger(slog.New(misbehavingLog{t, b, &cp, &logs})),
	}
	if site == "key" {
		opts = append(opts, seqjetstream.WithKeyFunc(func(m jetstream.Msg) string {
			if first() {
				b.do(t, &cp, nil)
			}
			return m.Subject()
		}))
	}
	if site == "deadletter" {
		opts = append(opts, seqjetstream.WithDeadLetter(func(ctx context.Context, m jetstream.Msg, _ int, _ error) error {
			if first() {
				b.do(t, &cp, ctx)
				return errors.New("after a re-entrant Close")
			}
			return nil
		}))
	}
	if site != "logger" {
		opts[1] = seqjetstream.WithLogger(discard)
	}
	c := f.consumer(t, handler, opts...)
	cp.Store(c)
	r := start(t, c)
	publish(t, f.js, "k.a", "1")
	publish(t, f.js, "k.a", "2")

	if b == closes {
		// The close began from inside: Run ends, and whatever was held is
		// given back or finished; a Close from outside completes it.
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			t.Fatal("Run went on after a callback began the close")
		}
		require.NoError(t, c.Close(context.Background()))
		st := c.Stats()
		assert.Equal(t, st.Received, st.Acked+st.Termed+st.GivenBack+st.Duplicates+st.Dropped,
			"every delivery answered, or left for redelivery: %+v", st)
		assert.Zero(t, st.Buffered)
		return
	}

	switch site {
	case "key", "handler", "backoff":
		eventually(t, func() bool { return c.Stats().Acked == 2 }, "both acked: %+v", statsOf(c))
	case "deadletter", "logger":
		eventually(t, func() bool { st := c.Stats(); return st.Acked == 1 && st.Termed == 1 }, "one acked, one termed: %+v", statsOf(c))
	}
	st := c.Stats()
	switch site {
	case "key": // message 1 lost its key: it is ordered under "" instead
		assert.ElementsMatch(t, []uint64{1, 2}, l.key("k"))
	case "handler", "backoff":
		assert.Equal(t, []uint64{1, 2}, l.key("k"), "the failed message went first")
		assert.Equal(t, uint64(1), st.Retries)
	case "deadletter":
		assert.Equal(t, []uint64{2}, l.key("k"))
		assert.Equal(t, uint64(1), st.DeadLettered, "accepted on its second try")
	case "logger":
		assert.Equal(t, []uint64{2}, l.key("k"))
		assert.Positive(t, logs.Load(), "the termination was logged")
	}
	assert.Zero(t, st.Buffered)
	eventually(t, func() bool { return c.Stats().InFlight == 0 }, "no message in flight")
	eventually(t, func() bool { return info(t, f.cons).NumAckPending == 0 }, "every ack received by the server")
	require.NoError(t, r.close(t, 10*time.Second))
}

// TestBlockedKeyFunctionStallsOnlyItsConsumer: a key function that blocks
// holds up its own consumer's fetch goroutine, not the other consumers',
// and Close does not wait for it.
func TestBlockedKeyFunctionStallsOnlyItsConsumer(t *testing.T) {
	_, js := connect(t, startServer(t))
	s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"p.*.*"}})
	p0 := newConsumer(t, s, jetstream.ConsumerConfig{Durable: "p0", FilterSubject: "p.0.*"})
	p1 := newConsumer(t, s, jetstream.ConsumerConfig{Durable: "p1", FilterSubject: "p.1.*"})
	release := make(chan struct{})
	blocked := make(chan struct{})
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{p0, p1}, func(context.Context, jetstream.Msg) error { return nil },
		seqjetstream.WithKeyFunc(func(m jetstream.Msg) string {
			if m.Subject() == "p.0.block" {
				close(blocked)
				<-release
			}
			return m.Subject()
		}))
	require.NoError(t, err)
	r := start(t, c)
	publish(t, js, "p.0.block", "x")
	<-blocked
	for i := range 10 {
		publish(t, js, fmt.Sprintf("p.1.k%d", i), "x")
	}
	eventually(t, func() bool { return c.Stats().Consumers[1].Acked == 10 }, "the other consumer's messages")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.Close(ctx), "Close does not wait for a fetch goroutine")
	close(release)
	<-r.done // Run, which waits for it, returns once it is released
	assert.Equal(t, uint64(0), c.Stats().Consumers[0].Acked, "nothing answered after Close")
}
