package seqwatermill_test

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/seqwatermill"
)

// A KeyFunc that calls runtime.Goexit ends the subscription as the end of
// its ctx would: the channel closes only once the message in the handler
// was acked, and the queued ones are left un-acked.
func TestKeyFuncGoexitEndsTheSubscriptionAfterTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &releasing{in: make(chan *message.Message)} // unbuffered: a send returns once taken
		a1, a2, boom := msg("a1", "a"), msg("a2", "a"), msg("boom", "b")
		s, err := seqwatermill.NewSubscriber(r, seqwatermill.WithLogger(watermill.NopLogger{}),
			seqwatermill.WithKeyFunc(func(m *message.Message) string {
				if m.UUID == "boom" {
					runtime.Goexit()
				}
				return m.Metadata.Get("key")
			}))
		require.NoError(t, err)
		out, err := s.Subscribe(context.Background(), "topic")
		require.NoError(t, err)
		r.in <- a1
		first := next(t, out)
		require.Equal(t, "a1", first.UUID)
		r.in <- a2
		r.in <- boom
		synctest.Wait() // the KeyFunc has ended the dispatch goroutine
		select {
		case m, ok := <-out:
			t.Fatalf("got %v, ok %v; want nothing while a1 is in the handler", m, ok)
		default:
		}
		first.Ack()
		_, ok := <-out
		assert.False(t, ok, "a2 sent after the subscription ended")
		assert.Equal(t, "ack", settled(a1))
		assert.Equal(t, "", settled(a2))
		assert.Equal(t, "", settled(boom))
		require.NoError(t, s.Close())
	})
}

// A KeyFunc that panics has its panic logged with its value and stack, and
// its message ordered under the empty key.
func TestKeyFuncPanicIsLoggedWithItsStackAndTheMessageGoesOn(t *testing.T) {
	r := newReleasing(1)
	r.in <- msg("a1", "a")
	errs := make(chan error, 1)
	s, err := seqwatermill.NewSubscriber(r, seqwatermill.WithLogger(errorLogger{errs}),
		seqwatermill.WithKeyFunc(func(*message.Message) string { panic("no key") }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	out, err := s.Subscribe(context.Background(), "topic")
	require.NoError(t, err)
	m := next(t, out)
	assert.Equal(t, "a1", m.UUID)
	m.Ack()
	var pe *seqsched.PanicError
	require.ErrorAs(t, <-errs, &pe)
	assert.Equal(t, "no key", pe.Value)
	assert.Contains(t, string(pe.Stack), "TestKeyFuncPanicIsLoggedWithItsStack")
}

// errorLogger sends the error of each Error record on errs.
type errorLogger struct {
	errs chan error
}

func (l errorLogger) Error(_ string, err error, _ watermill.LogFields) { l.errs <- err }
func (l errorLogger) Info(string, watermill.LogFields)                 {}
func (l errorLogger) Debug(string, watermill.LogFields)                {}
func (l errorLogger) Trace(string, watermill.LogFields)                {}
func (l errorLogger) With(watermill.LogFields) watermill.LoggerAdapter { return l }

// A backoff that panics fails its message: nacked to the subscriber,
// logged at Error, and the key goes on.
func TestBackoffPanicNacksTheMessageAndTheKeyGoesOn(t *testing.T) {
	r := newReleasing(2)
	a1, a2 := msg("a1", "a"), msg("a2", "a")
	r.in <- a1
	r.in <- a2
	log := newRecorder()
	_, out := subscribe(t, r, seqwatermill.WithLogger(log),
		seqwatermill.WithRetries(2, func(context.Context, *message.Message, int, error) time.Duration { panic("bad backoff") }))
	next(t, out).Nack()
	select {
	case <-a1.Nacked():
	case <-time.After(10 * time.Second):
		t.Fatalf("a1 %q 10s after its backoff panicked; want nack", settled(a1))
	}
	m := next(t, out)
	assert.Equal(t, "a2", m.UUID)
	m.Ack()
	assert.Contains(t, log.errors(), "Message nacked: its task panicked or called runtime.Goexit <nil>")
}

// A logger that panics loses its record, and nothing else: the panic is
// written to slog.Default instead, on the goroutine that logged, and the
// subscription goes on.
func TestALoggerThatPanicsLosesItsRecordOnly(t *testing.T) {
	var got []string
	var mu sync.Mutex
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(p))
		return len(p), nil
	}), nil)))
	defer slog.SetDefault(prev)

	r := &releasing{in: make(chan *message.Message, 2)}
	boom, a1 := msg("boom", "b"), msg("a1", "a")
	s, err := seqwatermill.NewSubscriber(r, seqwatermill.WithLogger(panickingLogger{}),
		seqwatermill.WithKeyFunc(func(m *message.Message) string {
			if m.UUID == "boom" {
				panic("key") // logged at Error on the dispatch goroutine: the logger panics there
			}
			return m.Metadata.Get("key")
		}))
	require.NoError(t, err)
	out, err := s.Subscribe(context.Background(), "topic")
	require.NoError(t, err)
	r.in <- boom
	r.in <- a1
	var handled []string // two keys: in either order
	for range 2 {
		m := next(t, out)
		handled = append(handled, m.UUID)
		m.Ack()
	}
	assert.ElementsMatch(t, []string{"boom", "a1"}, handled)
	require.NoError(t, s.Close())
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, got)
	assert.Contains(t, got[0], "seqwatermill: the logger panicked; its record was dropped")
	assert.Contains(t, got[0], "KeyFunc panicked")
}

type panickingLogger struct{}

func (panickingLogger) Error(string, error, watermill.LogFields) { panic("logger") }
func (panickingLogger) Info(string, watermill.LogFields)         { panic("logger") }
func (panickingLogger) Debug(string, watermill.LogFields)        { panic("logger") }
func (panickingLogger) Trace(string, watermill.LogFields)        { panic("logger") }
func (l panickingLogger) With(watermill.LogFields) watermill.LoggerAdapter {
	return l
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
