package seqsched_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched"
)

// Two reporters of one key, each logging a dropped post, must not wait for
// each other: the first one's logger removes the key (waiting for the
// successor's drain, which waits for the second reporter), the second
// one's discards the first session (waiting for its drain, which waits for
// the first reporter). Each is a wait on its own goroutine, one step
// removed; the library must answer ErrWouldDeadlock rather than let both
// wait for ever (CI's FuzzModel input c0f891c1c11d93f0, a logger's Remove
// of its record's key that never returned).
func TestReportersOfOneKeyNeverWaitForEachOther(t *testing.T) {
	synctest.Test(t, reportersOfOneKey)
}

func reportersOfOneKey(t *testing.T) {
	var s *seqsched.Scheduler[string]
	var h1 *seqsched.Session[string]
	var errs [3]error
	waiting := [3]chan struct{}{nil, make(chan struct{}), make(chan struct{})}
	done := [3]chan struct{}{nil, make(chan struct{}), make(chan struct{})}
	var records atomic.Int32
	handler := &funcHandler{handle: func(context.Context, slog.Record) error {
		n := records.Add(1)
		if n > 2 {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		defer close(done[n])
		close(waiting[n])
		if n == 1 {
			errs[n] = s.Remove(ctx, "k") // the successor's drain
		} else {
			errs[n] = h1.Discard(ctx) // the first session's drain
		}
		return nil
	}}
	var err error
	s, err = seqsched.New[string](seqsched.WithLogger(slog.New(handler)))
	require.NoError(t, err)
	ctx := context.Background()

	h1, err = s.Open("k")
	require.NoError(t, err)
	gate, started := make(chan struct{}), make(chan struct{})
	busy, err := h1.Go(ctx, func(context.Context) error { close(started); <-gate; return nil })
	require.NoError(t, err)
	<-started
	require.NoError(t, h1.Post(ctx, func(context.Context) error { return nil })) // dropped by the first Discard
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(ctx, "k") }() // the first session closes
	synctest.Wait()                               // Remove waits for it
	h2, err := s.Open("k")                        // a successor, held back behind the first session
	require.NoError(t, err)
	require.NoError(t, h2.Post(ctx, func(context.Context) error { return nil })) // dropped by the second Discard

	discarded := make(chan error, 2)
	go func() { discarded <- h1.Discard(ctx) }() // reporter 1: its logger removes the key
	<-waiting[1]
	go func() { discarded <- h2.Discard(ctx) }() // reporter 2: its logger discards the first session
	<-waiting[2]
	close(gate)
	<-done[1]
	<-done[2]
	for n := 1; n <= 2; n++ {
		require.False(t, errors.Is(errs[n], context.DeadlineExceeded),
			"the logger of reporter %d waited for the other reporter, which waited for it", n)
	}
	_, err = busy.Await(ctx)
	require.NoError(t, err)
	require.NoError(t, <-removed)
	for range 2 {
		err := <-discarded
		require.True(t, err == nil || errors.Is(err, seqsched.ErrSessionClosing), "Discard = %v", err)
	}
	require.NoError(t, s.Shutdown(ctx))
}
