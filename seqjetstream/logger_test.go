package seqjetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"

	"github.com/seqsched/seqsched/internal/logkey"
	"github.com/seqsched/seqsched/seqjetstream"
)

// recordingHandler is a slog handler that passes on every record, and
// drops those no one is waiting for.
type recordingHandler struct{ records chan slog.Record }

func (h recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordingHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.records <- r.Clone():
	default:
	}
	return nil
}
func (h recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordingHandler) WithGroup(string) slog.Handler      { return h }

// TestFailuresReachSlogDefaultWithoutWithLogger swaps the process's
// default logger: it must not run in parallel with other tests.
func TestFailuresReachSlogDefaultWithoutWithLogger(t *testing.T) {
	rec := recordingHandler{records: make(chan slog.Record, 16)}
	old, oldOut, oldFlags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(rec))
	// Registered first, so it runs last: after the consumer has closed.
	// SetDefault also routes the log package through rec; undo that too.
	t.Cleanup(func() {
		slog.SetDefault(old)
		log.SetOutput(oldOut)
		log.SetFlags(oldFlags)
	})

	f := newFixture(t, jetstream.ConsumerConfig{})
	c := f.consumer(t, func(context.Context, jetstream.Msg) error {
		return seqjetstream.Terminal(errors.New("cannot parse"))
	}) // no WithLogger, no dead-letter function
	start(t, c)
	seq := publish(t, f.js, "k.a", "x")

	deadline := time.After(20 * time.Second)
	for {
		select {
		case r := <-rec.records:
			if r.Message != "seqjetstream: message terminated" {
				continue
			}
			attrs := map[string]string{}
			r.Attrs(func(a slog.Attr) bool {
				attrs[a.Key] = a.Value.String()
				return true
			})
			assert.Equal(t, slog.LevelError, r.Level)
			assert.Equal(t, "k.a", attrs["subject"])
			assert.Equal(t, "1", attrs["attempts"])
			assert.Equal(t, "cannot parse", attrs["err"])
			assert.Equal(t, fmt.Sprint(seq), attrs["sequence"])
			return
		case <-deadline:
			t.Fatalf("no termination logged on slog.Default(): %+v", c.Stats())
		}
	}
}

// A subject is the publisher's key: its log field is cut to
// logkey.Max bytes (slog's handlers quote it), so a long one cannot make
// every record of it as large.
func TestLoggedSubjectIsCut(t *testing.T) {
	rec := recordingHandler{records: make(chan slog.Record, 16)}
	f := newFixture(t, jetstream.ConsumerConfig{})
	c := f.consumer(t, func(context.Context, jetstream.Msg) error {
		return seqjetstream.Terminal(errors.New("cannot parse"))
	}, seqjetstream.WithLogger(slog.New(rec)))
	start(t, c)
	subject := "k." + strings.Repeat("x", 1000)
	publish(t, f.js, subject, "x")

	deadline := time.After(20 * time.Second)
	for {
		select {
		case r := <-rec.records:
			if r.Message != "seqjetstream: message terminated" {
				continue
			}
			var got string
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "subject" {
					got = a.Value.String()
				}
				return true
			})
			assert.Equal(t, logkey.Cut(subject), got)
			assert.Less(t, len(got), logkey.Max+32)
			return
		case <-deadline:
			t.Fatalf("no termination logged: %+v", c.Stats())
		}
	}
}
