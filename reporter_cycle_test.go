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

// Two sessions of one key, each logging a dropped post, must not wait for
// each other: the first one's logger removes the key (the successor, which
// waits behind the first session), the second one's discards the first
// session. Given the ctx the logger was given, each call that would wait
// for its own caller answers ErrWouldDeadlock (or finds the session gone)
// rather than let both wait for ever.
func TestReportersOfOneKeyNeverWaitForEachOther(t *testing.T) {
	synctest.Test(t, reportersOfOneKey)
}

func reportersOfOneKey(t *testing.T) {
	var s *seqsched.Scheduler[string]
	var h1 *seqsched.Session[string]
	var errs [3]error
	var records atomic.Int32
	handler := &funcHandler{handle: func(ctx context.Context, r slog.Record) error {
		n := records.Add(1)
		if n > 2 {
			return nil
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
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
	go func() { discarded <- h1.Discard(ctx) }() // its report's logger removes the key
	go func() { discarded <- h2.Discard(ctx) }() // its report's logger discards the first session
	synctest.Wait()
	close(gate)
	_, err = busy.Await(ctx)
	require.NoError(t, err)
	require.NoError(t, <-removed)
	for range 2 {
		err := <-discarded
		require.True(t, err == nil || errors.Is(err, seqsched.ErrSessionClosing), "Discard = %v", err)
	}
	require.Equal(t, int32(2), records.Load(), "both dropped posts were logged")
	require.ErrorIs(t, errs[1], seqsched.ErrWouldDeadlock, "the first session's logger removing its own key's successor")
	require.ErrorIs(t, errs[2], seqsched.ErrSessionClosing, "the successor's logger discarding the first session, gone by then")
	require.NoError(t, s.Shutdown(ctx))
}
