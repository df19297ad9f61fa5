package seqjetstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/seqjetstream"
)

// fixture is a server with stream "S" on "k.*" and a plain consumer "d".
type fixture struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	cons   jetstream.Consumer
}

func newFixture(t *testing.T, cc jetstream.ConsumerConfig) *fixture {
	t.Helper()
	_, js := connect(t, startServer(t))
	s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"k.*"}})
	if cc.Durable == "" {
		cc.Durable = "d"
	}
	return &fixture{js: js, stream: s, cons: newConsumer(t, s, cc)}
}

func (f *fixture) consumer(t *testing.T, h seqjetstream.Handler, opts ...seqjetstream.Option) *seqjetstream.Consumer {
	t.Helper()
	return f.consumerOf(t, f.cons, h, opts...)
}

func (f *fixture) consumerOf(t *testing.T, cons jetstream.Consumer, h seqjetstream.Handler, opts ...seqjetstream.Option) *seqjetstream.Consumer {
	t.Helper()
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{cons}, h, opts...)
	require.NoError(t, err)
	return c
}

func fast(context.Context, jetstream.Msg, int, error) time.Duration { return time.Millisecond }

func TestEachKeyInStreamOrderAcrossRetries(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	l := newLedger()
	var failures atomic.Int64
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		seq := seqOf(t, m)
		if seq%7 == 0 && l.call(seq) < 3 { // every 7th fails twice
			failures.Add(1)
			return errors.New("transient")
		}
		l.apply(m.Subject(), seq)
		return nil
	}, seqjetstream.WithRetries(3, fast), seqjetstream.WithMaxConcurrency(8))
	start(t, c)

	want := make(map[string][]uint64)
	for i := range 400 {
		subj := fmt.Sprintf("k.%d", i%20)
		want[subj] = append(want[subj], publish(t, f.js, subj, "x"))
	}
	eventually(t, func() bool { return c.Stats().Acked == 400 }, "400 acks: %+v", statsOf(c))
	for subj, seqs := range want {
		assert.Equal(t, seqs, l.key(subj), "order of %s", subj)
	}
	st := c.Stats()
	assert.Equal(t, uint64(failures.Load()), st.Retries, "retries")
	assert.Equal(t, uint64(400), st.HandlerTime.Count-st.Retries, "handler attempts that succeeded")
	assert.Equal(t, uint64(400), st.QueueTime.Count, "queue times: one per message")
	assert.Zero(t, st.Termed)
	eventually(t, func() bool { return info(t, f.cons).NumAckPending == 0 }, "every ack received by the server")
}

func TestDifferentKeysRunAtOnce(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	var inside sync.WaitGroup
	inside.Add(2)
	both := make(chan struct{})
	go func() { inside.Wait(); close(both) }()
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		inside.Done()
		select { // each key's handler waits for the other's: only parallel keys get through
		case <-both:
			return nil
		case <-time.After(20 * time.Second):
			return errors.New("the other key never ran alongside")
		}
	}, seqjetstream.WithRetries(1, nil))
	start(t, c)
	publish(t, f.js, "k.a", "1")
	publish(t, f.js, "k.b", "1")
	eventually(t, func() bool { return c.Stats().Acked == 2 }, "both acked: %+v", statsOf(c))
}

func TestRedeliveryOfAnAckedMessageIsAckedAgainNotHandled(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{AckWait: 300 * time.Millisecond})
	var calls atomic.Int32
	var dropped atomic.Bool
	cons := wrapConsumer{f.cons, func(m jetstream.Msg) jetstream.Msg {
		return hookMsg{Msg: m, onAck: func() bool {
			return !dropped.CompareAndSwap(false, true) // the first ack is lost on the way
		}}
	}}
	c := f.consumerOf(t, cons, func(ctx context.Context, m jetstream.Msg) error {
		calls.Add(1)
		return nil
	})
	start(t, c)
	publish(t, f.js, "k.a", "1")
	eventually(t, func() bool { return c.Stats().Duplicates == 1 }, "the redelivery recognised: %+v", statsOf(c))
	eventually(t, func() bool { return info(t, f.cons).NumAckPending == 0 }, "acked at last")
	assert.Equal(t, int32(1), calls.Load(), "handler calls")
	assert.Equal(t, uint64(2), c.Stats().Received)
	assert.Equal(t, uint64(2), info(t, f.cons).Delivered.Consumer, "deliveries the server made")
}

func TestRedeliveryOfAHeldMessageRunsNoSecondHandler(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{AckWait: 300 * time.Millisecond})
	cons := wrapConsumer{f.cons, func(m jetstream.Msg) jetstream.Msg {
		return hookMsg{Msg: m, onProgress: func() bool { return false }} // every InProgress lost
	}}
	var calls atomic.Int32
	var c *seqjetstream.Consumer
	c = f.consumerOf(t, cons, func(ctx context.Context, m jetstream.Msg) error {
		calls.Add(1)
		// Hold the message until JetStream has redelivered it twice.
		eventually(t, func() bool { return c.Stats().Duplicates >= 2 }, "redeliveries while held")
		return nil
	})
	start(t, c)
	publish(t, f.js, "k.a", "1")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "acked")
	assert.Equal(t, int32(1), calls.Load(), "handler calls")
	eventually(t, func() bool { return info(t, f.cons).NumAckPending == 0 }, "nothing pending")
}

func TestInProgressKeepsHeldMessagesFromRedelivery(t *testing.T) {
	// InProgress goes out every third of AckWait, so a held message is
	// redelivered only if the consumer's goroutines are starved for two
	// thirds of it: 200ms at an AckWait of 300ms, which a loaded 2-core
	// machine running the race detector can starve them for (3
	// redeliveries seen: the three held messages, once). One second
	// leaves 667ms and still tests nine InProgress rounds.
	f := newFixture(t, jetstream.ConsumerConfig{AckWait: time.Second})
	l := newLedger()
	var c *seqjetstream.Consumer
	c = f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		seq := seqOf(t, m)
		l.call(seq)
		if seq == 1 {
			// Run for more than three AckWaits while two messages of the
			// key queue behind: nine InProgress rounds (a third of AckWait
			// each) for the three held messages.
			eventually(t, func() bool { return c.Stats().Heartbeats >= 27 }, "InProgress sent")
		}
		l.apply(m.Subject(), seq)
		return nil
	})
	start(t, c)
	for range 3 {
		publish(t, f.js, "k.a", "x")
	}
	eventually(t, func() bool { return c.Stats().Acked == 3 }, "acked: %+v", statsOf(c))
	st := c.Stats()
	assert.Zero(t, st.Duplicates, "redeliveries")
	assert.Equal(t, uint64(3), st.Received, "deliveries")
	assert.Equal(t, []uint64{1, 2, 3}, l.key("k.a"))
	assert.Equal(t, uint64(3), info(t, f.cons).Delivered.Consumer, "deliveries the server made")
}

func TestPoisonMessageIsTerminatedAndDeadLetteredAndItsKeyGoesOn(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	newStream(t, f.js, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq"}})
	dlq, err := seqjetstream.DeadLetterSubject(f.js, "dlq")
	require.NoError(t, err)
	l := newLedger()
	poison := errors.New("cannot parse")
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		if string(m.Data()) == "poison" {
			return poison
		}
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	}, seqjetstream.WithRetries(3, fast), seqjetstream.WithDeadLetter(dlq), seqjetstream.WithLogger(discard))
	start(t, c)
	publish(t, f.js, "k.a", "ok")
	bad := publish(t, f.js, "k.a", "poison", "Trace", "t-1")
	publish(t, f.js, "k.a", "ok")
	eventually(t, func() bool { st := c.Stats(); return st.Acked == 2 && st.Termed == 1 }, "2 acked, 1 termed: %+v", statsOf(c))

	st := c.Stats()
	assert.Equal(t, uint64(1), st.DeadLettered)
	assert.Equal(t, uint64(2), st.Retries)
	assert.Equal(t, []uint64{1, 3}, l.key("k.a"), "the key went on past its poison message")
	eventually(t, func() bool { return info(t, f.cons).NumAckPending == 0 }, "every ack received by the server")

	dc, err := f.js.OrderedConsumer(context.Background(), "DLQ", jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	m, err := dc.Next(jetstream.FetchMaxWait(5 * time.Second))
	require.NoError(t, err)
	assert.Equal(t, "poison", string(m.Data()))
	h := m.Headers()
	assert.Equal(t, "k.a", h.Get(seqjetstream.HeaderSubject))
	assert.Equal(t, "S", h.Get(seqjetstream.HeaderStream))
	assert.Equal(t, fmt.Sprint(bad), h.Get(seqjetstream.HeaderSequence))
	assert.Equal(t, "3", h.Get(seqjetstream.HeaderAttempts))
	assert.Equal(t, "cannot parse", h.Get(seqjetstream.HeaderError))
	assert.Equal(t, "t-1", h.Get("Trace"), "the original headers")
}

func TestTerminalErrorSkipsTheRetries(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	type dead struct {
		attempts int
		cause    error
	}
	got := make(chan dead, 1)
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		return seqjetstream.Terminal(errors.New("unknown account"))
	}, seqjetstream.WithRetries(5, fast), seqjetstream.WithDeadLetter(func(ctx context.Context, m jetstream.Msg, attempts int, err error) error {
		got <- dead{attempts, err}
		return nil
	}))
	start(t, c)
	publish(t, f.js, "k.a", "x")
	d := <-got
	assert.Equal(t, 1, d.attempts)
	assert.ErrorIs(t, d.cause, seqjetstream.ErrTerminal)
	assert.EqualError(t, d.cause, "unknown account")
	eventually(t, func() bool { return c.Stats().Termed == 1 }, "termed")
	assert.Zero(t, c.Stats().Retries)
}

func TestBackoffBlocksOnlyItsKeyAndHoldsNoSlot(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{AckWait: time.Minute})
	l := newLedger()
	failed, otherRan := make(chan struct{}), make(chan struct{})
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		switch string(m.Data()) {
		case "fails":
			close(failed) // runs once: the retry waits an hour
			return errors.New("transient")
		case "other":
			defer close(otherRan)
		}
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	},
		seqjetstream.WithMaxConcurrency(1), // b can only run if a's backoff lends the one slot
		seqjetstream.WithRetries(2, func(context.Context, jetstream.Msg, int, error) time.Duration { return time.Hour }))
	r := start(t, c)
	publish(t, f.js, "k.a", "fails")
	publish(t, f.js, "k.a", "after")
	<-failed
	publish(t, f.js, "k.b", "other")
	select {
	case <-otherRan:
	case <-time.After(20 * time.Second):
		t.Fatalf("b's message did not run while a backs off: the backoff holds the slot; %+v", c.Stats())
	}
	assert.Equal(t, []uint64{3}, l.key("k.b"), "b's message ran while a backs off")
	assert.Empty(t, l.key("k.a"), "a's next message ran before a's retry")
	assert.Equal(t, uint64(1), c.Stats().Retries)
	require.NoError(t, r.close(t, 10*time.Second))
	assert.Equal(t, uint64(2), c.Stats().GivenBack, "a's two messages, given back by Close")
}

func TestHandlerPanicIsAFailedAttempt(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	l := newLedger()
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		seq := seqOf(t, m)
		switch seqjetstream.Attempt(ctx) {
		case 1:
			if seq == 1 {
				panic("boom")
			}
		case 2:
			if seq == 1 {
				runtimeGoexit()
			}
		}
		l.apply(m.Subject(), seq)
		return nil
	}, seqjetstream.WithRetries(3, fast))
	start(t, c)
	publish(t, f.js, "k.a", "1")
	publish(t, f.js, "k.a", "2")
	eventually(t, func() bool { return c.Stats().Acked == 2 }, "acked: %+v", statsOf(c))
	assert.Equal(t, []uint64{1, 2}, l.key("k.a"), "the panicking message went first, on its third attempt")
	assert.Equal(t, uint64(2), c.Stats().Retries)

	// Every attempt panicking: the dead-letter function sees the panic,
	// with its stack.
	causes := make(chan error, 1)
	f2 := newFixture(t, jetstream.ConsumerConfig{})
	c2 := f2.consumer(t, func(ctx context.Context, m jetstream.Msg) error { panic(fmt.Sprint("bad ", string(m.Data()))) },
		seqjetstream.WithRetries(2, fast), seqjetstream.WithDeadLetter(func(ctx context.Context, m jetstream.Msg, _ int, cause error) error {
			causes <- cause
			return nil
		}))
	start(t, c2)
	publish(t, f2.js, "k.a", "x")
	cause := <-causes
	var pe *panicError
	require.ErrorAs(t, cause, &pe)
	assert.Equal(t, "bad x", pe.Value)
	assert.Contains(t, string(pe.Stack), "consumer_test.go")
}

func TestStuckKeyStallsOnlyItsOwnConsumer(t *testing.T) {
	_, js := connect(t, startServer(t))
	s := newStream(t, js, jetstream.StreamConfig{Name: "S", Subjects: []string{"p.*.*"}})
	p0 := newConsumer(t, s, jetstream.ConsumerConfig{Durable: "p0", FilterSubject: "p.0.*", MaxAckPending: 5})
	p1 := newConsumer(t, s, jetstream.ConsumerConfig{Durable: "p1", FilterSubject: "p.1.*", MaxAckPending: 5})
	release := make(chan struct{})
	var done atomic.Int32
	c, err := seqjetstream.NewConsumer([]jetstream.Consumer{p0, p1}, func(ctx context.Context, m jetstream.Msg) error {
		if m.Subject() == "p.0.stuck" {
			<-release
		}
		done.Add(1)
		return nil
	}, seqjetstream.WithMaxBuffered(5))
	require.NoError(t, err)
	start(t, c)
	defer close(release)
	for range 20 {
		publish(t, js, "p.0.stuck", "x")
	}
	for i := range 50 {
		publish(t, js, fmt.Sprintf("p.0.other%d", i), "x") // same consumer, other keys: behind the bound
		publish(t, js, fmt.Sprintf("p.1.k%d", i%7), "x")
	}
	eventually(t, func() bool { return c.Stats().Consumers[1].Acked == 50 }, "the other consumer's 50 messages: %+v", statsOf(c))
	st := c.Stats()
	assert.Equal(t, 5, st.Consumers[0].Buffered, "the stuck consumer holds its MaxAckPending, no more")
	assert.Zero(t, st.Consumers[0].Acked)
	assert.LessOrEqual(t, st.Consumers[1].Buffered, 5)
}

func TestRememberedStaysBoundedWhateverTheKeys(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{MaxAckPending: 50})
	c := f.consumer(t, func(context.Context, jetstream.Msg) error { return nil }, seqjetstream.WithMaxBuffered(50))
	start(t, c)
	const n = 2000
	for i := range n {
		publish(t, f.js, fmt.Sprintf("k.%d", i), "x") // every message a new key
	}
	eventually(t, func() bool { return c.Stats().Acked == n }, "acked")
	assert.Equal(t, 200, c.Stats().Consumers[0].Remembered, "4 × WithMaxBuffered")
}

func TestHighPriorityOvertakesItsKeysQueue(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	l := newLedger()
	started, release := make(chan struct{}), make(chan struct{})
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		seq := seqOf(t, m)
		if seq == 1 {
			close(started)
			<-release
		}
		l.apply(m.Subject(), seq)
		return nil
	}, seqjetstream.WithPriorityHeader(seqjetstream.DefaultPriorityHeader))
	start(t, c)
	publish(t, f.js, "k.a", "1")
	<-started
	publish(t, f.js, "k.a", "2")
	publish(t, f.js, "k.a", "3")
	publish(t, f.js, "k.a", "4", seqjetstream.DefaultPriorityHeader, "HIGH")
	eventually(t, func() bool { return c.Stats().Buffered == 4 }, "all four held")
	close(release)
	eventually(t, func() bool { return c.Stats().Acked == 4 }, "acked")
	assert.Equal(t, []uint64{1, 4, 2, 3}, l.key("k.a"))
}

func TestKeyHeaderAndKeyFunc(t *testing.T) {
	for name, opt := range map[string]seqjetstream.Option{
		"header": seqjetstream.WithKeyHeader("Account"),
		"func":   seqjetstream.WithKeyFunc(func(m jetstream.Msg) string { return m.Headers().Get("Account") }),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, jetstream.ConsumerConfig{})
			l := newLedger()
			c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
				l.apply(m.Headers().Get("Account"), seqOf(t, m))
				return nil
			}, opt)
			start(t, c)
			var want []uint64
			for i := range 30 {
				want = append(want, publish(t, f.js, fmt.Sprintf("k.%d", i), "x", "Account", "acct-1"))
			}
			eventually(t, func() bool { return c.Stats().Acked == 30 }, "acked")
			assert.Equal(t, want, l.key("acct-1"), "30 subjects, one key")
		})
	}
}

// A second Run while one is in progress returns ErrRunning, and leaves the
// first running.
func TestSecondRunReturnsErrRunning(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	c := f.consumer(t, func(context.Context, jetstream.Msg) error { return nil })
	r := start(t, c)
	publish(t, f.js, "k.a", "1")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "the first Run is running")
	assert.ErrorIs(t, c.Run(context.Background()), seqjetstream.ErrRunning)
	publish(t, f.js, "k.a", "2")
	eventually(t, func() bool { return c.Stats().Acked == 2 }, "the first Run goes on")
	require.NoError(t, r.close(t, 10*time.Second))
}

// A handler that calls runtime.Goexit (t.FailNow in a test) is a failed
// attempt, like a panic: retried, then dead-lettered with an error
// wrapping seqsched.ErrGoexit, in its key's order.
func TestHandlerGoexitIsAFailedAttempt(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	l := newLedger()
	var calls atomic.Int32
	causes := make(chan error, 1)
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		if string(m.Data()) == "exits" {
			calls.Add(1)
			runtimeGoexit()
		}
		l.apply(m.Subject(), seqOf(t, m))
		return nil
	}, seqjetstream.WithRetries(2, fast), seqjetstream.WithDeadLetter(func(ctx context.Context, m jetstream.Msg, _ int, err error) error {
		causes <- err
		return nil
	}))
	start(t, c)
	publish(t, f.js, "k.a", "exits")
	publish(t, f.js, "k.a", "after")
	assert.ErrorIs(t, <-causes, seqschedErrGoexit)
	eventually(t, func() bool { st := c.Stats(); return st.Acked == 1 && st.Termed == 1 }, "%+v", statsOf(c))
	assert.Equal(t, int32(2), calls.Load())
	assert.Equal(t, []uint64{2}, l.key("k.a"))
}

func TestRunAndCloseRules(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	c := f.consumer(t, func(context.Context, jetstream.Msg) error { return nil })
	//lint:ignore SA1012 the nil ctx is the test
	assert.ErrorIs(t, c.Run(nil), seqjetstream.ErrNilContext) //nolint:staticcheck
	r := start(t, c)
	publish(t, f.js, "k.a", "x")
	eventually(t, func() bool { return c.Stats().Acked == 1 }, "consumed: Run is running")
	assert.ErrorIs(t, c.Run(context.Background()), seqjetstream.ErrRunning)
	require.NoError(t, r.close(t, 5*time.Second))
	require.NoError(t, r.err)
	assert.ErrorIs(t, c.Run(context.Background()), seqjetstream.ErrClosed)
	assert.NoError(t, c.Close(context.Background()), "Close again")

	// Run's ctx ending stops it; the consumer stays usable.
	c2 := f.consumer(t, func(context.Context, jetstream.Msg) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, c2.Run(ctx), context.Canceled)
	start(t, c2)
	publish(t, f.js, "k.a", "y")
	eventually(t, func() bool { return c2.Stats().Acked == 1 }, "consumed after a second Run")
}

// sorted returns seqs sorted, for comparing sets.
func sorted(seqs []uint64) []uint64 {
	out := slices.Clone(seqs)
	slices.Sort(out)
	return out
}

// HandlerTime counts every handler call, retries included; QueueTime
// counts each message once, up to its first call.
func TestStatsHandlerTimeCountsEveryHandlerCall(t *testing.T) {
	f := newFixture(t, jetstream.ConsumerConfig{})
	var once sync.Once
	c := f.consumer(t, func(ctx context.Context, m jetstream.Msg) error {
		failed := false
		if string(m.Data()) == "flaky" {
			once.Do(func() { failed = true })
		}
		if failed {
			return errors.New("not yet")
		}
		return nil
	}, seqjetstream.WithRetries(2, fast))
	start(t, c)
	publish(t, f.js, "k.a", "flaky")
	publish(t, f.js, "k.a", "ok")
	eventually(t, func() bool { return c.Stats().Acked == 2 }, "acked: %+v", statsOf(c))
	s := c.Stats()
	assert.Equal(t, uint64(3), s.HandlerTime.Count, "2 messages, 1 retry")
	assert.Equal(t, uint64(2), s.QueueTime.Count, "one per message")
	assert.Equal(t, uint64(1), s.Retries)
}
