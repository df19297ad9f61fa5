package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// Discard resolves the posted tasks it drops with ErrDiscarded and reports
// their failures on the session's goroutine, which Discard (and so the
// session's drain) waits for. The error handler, or the logger without
// one, runs there; if it ends its own key (Remove, Close of the last
// handle, Discard) with the ctx it was given, that call must not wait for
// the goroutine it runs on: it returns ErrWouldDeadlock.
func TestCallbackReportingADiscardMayEndItsOwnKey(t *testing.T) {
	for _, from := range []string{"error handler", "logger"} {
		for _, call := range []string{"Remove", "Close", "Discard", "Discard through the handle"} {
			t.Run(from+"/"+call, func(t *testing.T) {
				endOwnKeyWhileReportingADiscard(t, from, call)
			})
		}
	}
}

func endOwnKeyWhileReportingADiscard(t *testing.T, from, call string) {
	var s *seqsched.Scheduler[string]
	var h *seqsched.Session[string]
	got := make(chan error, 1)
	var fired atomic.Bool
	react := func(ctx context.Context, key string) {
		if fired.Swap(true) {
			return
		}
		switch call {
		case "Remove":
			got <- s.Remove(ctx, key)
		case "Close":
			got <- h.Close(ctx)
		case "Discard":
			got <- s.Discard(ctx, key)
		case "Discard through the handle":
			got <- h.Discard(ctx)
		}
	}
	opts := []seqsched.Option{seqsched.WithLogger(slog.New(slog.DiscardHandler))}
	if from == "error handler" {
		opts = append(opts, seqsched.WithErrorHandler(func(ctx context.Context, key string, err error) {
			if errors.Is(err, seqsched.ErrDiscarded) {
				react(ctx, key)
			}
		}))
	} else {
		opts = append(opts, seqsched.WithLogger(slog.New(&funcHandler{handle: func(ctx context.Context, r slog.Record) error {
			if r.Message == "seqsched: posted task failed" {
				var key string
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "session" {
						key = fmt.Sprint(a.Value.Any())
					}
					return true
				})
				react(ctx, key)
			}
			return nil
		}})))
	}
	var err error
	s, err = seqsched.New[string](opts...)
	require.NoError(t, err)
	h, err = s.Open("a")
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	running, err := h.Go(context.Background(), func(context.Context) error {
		close(started)
		<-release // keeps the session from being forgotten while the reports go on
		return nil
	})
	require.NoError(t, err)
	<-started
	for range 3 {
		require.NoError(t, h.Post(context.Background(), func(context.Context) error { return nil }))
	}
	discarded := make(chan error, 1)
	go func() { discarded <- s.Discard(context.Background(), "a") }()
	// Discard drops the queue at once; the reports run on the session's
	// goroutine once its running task returns, and the callback ends its
	// own key with the ctx it was given.
	for {
		if _, n := s.Queued("a"); n == 0 {
			break
		}
		runtime.Gosched()
	}
	close(release)
	select {
	case err := <-got:
		if err != nil && !errors.Is(err, seqsched.ErrWouldDeadlock) {
			t.Fatalf("%s of its own key from the %s reporting a Discard = %v; want ErrWouldDeadlock (or nil)", call, from, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s from the %s did not return", call, from)
	}
	awaitAll(t, running)
	select {
	case err := <-discarded:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Discard did not return once its running task returned")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
}
