package seqsched_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// Shutdown returns nil once every goroutine the scheduler started has
// returned; nothing of the scheduler's may run user code after that. But
// Discard starts the goroutine that reports the posts it dropped (and
// takes its live token) only after it has released the shard's lock and
// woken the waiters of the futures it dropped: if the session's worker
// exits meanwhile, a Shutdown waiting for it returns nil, and then the
// error handler runs. Many dropped futures with waiters widen the window.
// Found by the model test (seed 1069824669538284448: "the error handler
// ran after Shutdown returned nil").
func TestDiscardReportsNothingAfterShutdownReturnedNil(t *testing.T) {
	for round := range 20 {
		var shutDown, late atomic.Bool
		s, err := seqsched.New[string](seqsched.WithErrorHandler(func(context.Context, string, error) {
			if shutDown.Load() {
				late.Store(true)
			}
		}))
		require.NoError(t, err)
		started, release := make(chan struct{}), make(chan struct{})
		_, err = s.Go(context.Background(), "a", func(context.Context) error {
			close(started)
			<-release
			return nil
		})
		require.NoError(t, err)
		<-started
		require.NoError(t, s.Post(context.Background(), "a", func(context.Context) error { return nil }))
		for range 20000 {
			f, err := s.Go(context.Background(), "a", func(context.Context) error { return nil })
			require.NoError(t, err)
			f.Done() // a waiter for Discard to wake
		}
		discarded := make(chan error, 1)
		go func() { discarded <- s.Discard(context.Background(), "a") }()
		for { // until Discard has emptied the queues: "a" refuses new tasks
			_, err := s.Go(context.Background(), "a", func(context.Context) error { return nil })
			if errors.Is(err, seqsched.ErrSessionClosing) {
				break
			}
			require.NoError(t, err)
		}
		shutdownDone := make(chan error, 1)
		go func() {
			err := s.Shutdown(context.Background())
			shutDown.Store(true)
			shutdownDone <- err
		}()
		close(release) // the worker retires the session and exits, while Discard wakes waiters
		require.NoError(t, <-shutdownDone)
		require.NoError(t, <-discarded)
		if late.Load() {
			t.Fatalf("round %d: the error handler ran after Shutdown returned nil", round)
		}
	}
}
