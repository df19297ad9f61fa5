package seqwatermill_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/seqsched/seqsched/seqwatermill"
)

// releasing is a subscriber that sends its messages in order without
// waiting for their Acks, as a broker with an ack window does. The test
// feeds in; Close closes it.
type releasing struct {
	in   chan *message.Message
	once sync.Once
}

func newReleasing(buffer int) *releasing {
	return &releasing{in: make(chan *message.Message, buffer)}
}

func (r *releasing) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	return r.in, nil
}

func (r *releasing) Close() error {
	r.once.Do(func() { close(r.in) })
	return nil
}

// msg returns a message of key (metadata "key") whose UUID is id.
func msg(id, key string) *message.Message {
	m := message.NewMessage(id, nil)
	m.Metadata.Set("key", key)
	return m
}

// subscribe wraps r with opts (keyed by metadata "key") and subscribes;
// the Subscriber is closed at the end of the test.
func subscribe(t *testing.T, r *releasing, opts ...seqwatermill.Option) (*seqwatermill.Subscriber, <-chan *message.Message) {
	t.Helper()
	s, err := seqwatermill.NewSubscriber(r, append([]seqwatermill.Option{seqwatermill.WithKeyMetadata("key"),
		seqwatermill.WithLogger(watermill.NopLogger{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	out, err := s.Subscribe(context.Background(), "topic")
	if err != nil {
		t.Fatal(err)
	}
	return s, out
}

// next receives a message from out, failing the test after 10s.
func next(t *testing.T, out <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-out:
		if !ok {
			t.Fatal("channel closed; want a message")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message in 10s")
		return nil
	}
}

// settled reports how m was settled: "ack", "nack" or "" (not yet).
func settled(m *message.Message) string {
	select {
	case <-m.Acked():
		return "ack"
	case <-m.Nacked():
		return "nack"
	default:
		return ""
	}
}

// noBackoff retries a nacked message at once.
func noBackoff(context.Context, *message.Message, int, error) time.Duration { return 0 }

// recorder is a logger that keeps the Error records and sends the key of
// each halt (a record with seqwatermill.ErrHalted) on halts.
type recorder struct {
	watermill.NopLogger
	halts chan string
	mu    *sync.Mutex
	errs  *[]string // "<msg> <message_uuid>" of each Error record
	errv  *[]error  // the error of each Error record
}

func newRecorder() recorder {
	return recorder{halts: make(chan string, 16), mu: new(sync.Mutex), errs: new([]string), errv: new([]error)}
}

func (r recorder) Error(msg string, err error, fields watermill.LogFields) {
	r.mu.Lock()
	*r.errs = append(*r.errs, fmt.Sprint(msg, " ", unquote(fields["message_uuid"])))
	*r.errv = append(*r.errv, err)
	r.mu.Unlock()
	if errors.Is(err, seqwatermill.ErrHalted) {
		r.halts <- unquote(fields["key"]).(string)
	}
}

func (r recorder) With(watermill.LogFields) watermill.LoggerAdapter { return r }

// errors returns the Error records so far.
func (r recorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(*r.errs)
}

// loggedError reports whether an Error record's error matches target.
func (r recorder) loggedError(target error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(*r.errv, func(err error) bool { return errors.Is(err, target) })
}

// halted waits for the halt of a key to be logged and returns the key,
// failing the test after 10s.
func (r recorder) halted(t *testing.T) string {
	t.Helper()
	select {
	case key := <-r.halts:
		return key
	case <-time.After(10 * time.Second):
		t.Fatal("no halt logged in 10s")
		return ""
	}
}

// unquote returns the value of a log field that holds a quoted key or
// UUID, as written; a field that is not a quoted string as it is.
func unquote(v any) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	u, err := strconv.Unquote(s)
	if err != nil {
		return v
	}
	return u
}

// orderViolation checks a key's handled messages against the contract's
// checker: each message is handled only after every earlier one of its
// key was (a repeat of one handled already is at least once, and allowed),
// and each is handled. It returns "" or what broke.
func orderViolation[T comparable](handled, want []T) string {
	frontier := 0 // want[:frontier] have been handled
	for _, m := range handled {
		p := slices.Index(want, m)
		switch {
		case p < 0:
			return fmt.Sprintf("%v handled, not a message of the key", m)
		case p > frontier:
			return fmt.Sprintf("%v handled before %v", m, want[frontier])
		case p == frontier:
			frontier++
		}
	}
	if frontier < len(want) {
		return fmt.Sprintf("%v never handled", want[frontier])
	}
	return ""
}
