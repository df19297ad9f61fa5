// Backpressure: WithMaxQueue bounds the tasks a session holds queued (the
// running one not counted) and a submission beyond it fails at once with
// ErrQueueFull; Queued says how many tasks a key's next task waits behind.

package seqsched_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

func TestMaxQueueRejectsWithErrQueueFull(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxQueue(2))
	release, g := gate(t, s, "k") // running: not counted
	var r recorder
	fs := []*seqsched.Future[struct{}]{
		record(t, s, &r, "k", "n1"),
		record(t, s, &r, "k", "n2"),
		record(t, s, &r, "k", "h1", seqsched.High), // High has its own bound
		record(t, s, &r, "k", "h2", seqsched.High),
	}
	noop := func(context.Context) error { return nil }
	_, err := s.Go(context.Background(), "k", noop)
	require.ErrorIs(t, err, seqsched.ErrQueueFull)
	_, err = s.Go(context.Background(), "k", noop, seqsched.High)
	require.ErrorIs(t, err, seqsched.ErrQueueFull)
	fs = append(fs, record(t, s, &r, "other", "other")) // other sessions are unaffected
	awaitAll(t, fs[4])

	st := s.Stats()
	require.Equal(t, uint64(6), st.Submitted, "rejected tasks must leave no trace")
	require.Equal(t, 4, st.Queued)
	release()
	awaitAll(t, append(fs, g)...)
	require.Equal(t, []string{"other", "h1", "h2", "n1", "n2"}, r.get())
}

func TestQueuedCountsTheTasksASuccessorWaitsBehind(t *testing.T) {
	s := newScheduler[string](t)
	release, busy := gate(t, s, "k")
	for range 5 {
		_, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
		require.NoError(t, err)
	}
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(context.Background(), "k") }()
	for { // Remove closed the session
		if _, err := s.Go(context.Background(), "k", func(context.Context) error { return nil }); err != nil {
			require.ErrorIs(t, err, seqsched.ErrSessionClosing)
			break
		}
		runtime.Gosched()
	}
	h, err := s.Open("k")
	require.NoError(t, err)
	_, normal := s.Queued("k")
	_, hn := h.Queued()
	require.GreaterOrEqual(t, normal, 5, "the key's queued tasks, the predecessor's included")
	require.Equal(t, normal, hn, "the handle on the successor says the same")
	release()
	awaitAll(t, busy)
	require.NoError(t, <-removed)
	require.NoError(t, h.Close(context.Background()))
}
