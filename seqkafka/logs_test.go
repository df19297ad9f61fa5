package seqkafka_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// logSink is a slog.Handler that keeps messages and lets a test wait for
// one containing a given text.
type logSink struct {
	mu      sync.Mutex
	msgs    []string
	waiters map[string]chan struct{}
}

func newLogSink() *logSink { return &logSink{waiters: map[string]chan struct{}{}} }

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (s *logSink) WithAttrs([]slog.Attr) slog.Handler       { return s }
func (s *logSink) WithGroup(string) slog.Handler            { return s }

func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, b.String())
	for text, ch := range s.waiters {
		if strings.Contains(b.String(), text) {
			close(ch)
			delete(s.waiters, text)
		}
	}
	return nil
}

// when returns a channel closed once a message containing text is logged.
func (s *logSink) when(text string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	for _, m := range s.msgs {
		if strings.Contains(m, text) {
			close(ch)
			return ch
		}
	}
	s.waiters[text] = ch
	return ch
}

func (s *logSink) logger() *slog.Logger { return slog.New(s) }
