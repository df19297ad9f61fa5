// Stats: the counters are exact once the scheduler is quiet (submitted,
// completed, skipped, panics); yields are counted, not logged; slow tasks
// are logged and counted; the wait histogram reports queue waits by
// priority, over bounds from 1µs to 1m.

package seqsched_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

func TestStatsAreExactWhenQuiet(t *testing.T) {
	s := newScheduler[int](t, seqsched.WithMaxConcurrency(3))
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	var fs []*seqsched.Future[struct{}]
	for i := range 3000 {
		ctx := context.Background()
		if i%100 == 0 {
			ctx = canceled
		}
		f, err := s.Go(ctx, i%37, func(context.Context) error {
			if i%250 == 0 {
				panic("planned")
			}
			return nil
		}, seqsched.Priority(i%2))
		require.NoError(t, err)
		fs = append(fs, f)
	}
	for _, f := range fs {
		<-f.Done()
	}
	st := s.Stats()
	require.Equal(t, 0, st.Sessions)
	require.Equal(t, 0, st.Running)
	require.Equal(t, 0, st.Queued)
	require.Equal(t, uint64(3000), st.Submitted)
	require.Equal(t, uint64(3000), st.Completed)
	require.Equal(t, uint64(30), st.Skipped, "every i%100 == 0 had a canceled ctx")
	// i%250 == 0 panics, except i%500 == 0, which was skipped first.
	require.Equal(t, uint64(12-6), st.Panics)
}

// Every yield counted in Stats is logged at Debug, with the session: with a
// limit (the slot goes to a waiting session) and without one (Gosched).
// Yields are counted, not logged: a record per yield would put the logger
// on the hot path of every busy session.
func TestYieldsAreCountedNotLogged(t *testing.T) {
	for _, limit := range []int{0, 1} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			var logs syncBuffer
			opts := []seqsched.Option{seqsched.WithYieldAfter(10),
				seqsched.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))}
			if limit > 0 {
				opts = append(opts, seqsched.WithMaxConcurrency(limit))
			}
			s := newScheduler[string](t, opts...)
			// Without a limit, another live goroutine makes the busy
			// session yield; with one, a session waiting for the slot.
			other, og := gate(t, s, "other")
			if limit > 0 {
				other()
				awaitAll(t, og)
			}
			release, g := gate(t, s, "busy")
			fs := []*seqsched.Future[struct{}]{g}
			for range 29 {
				f, err := s.Go(context.Background(), "busy", func(context.Context) error { return nil })
				require.NoError(t, err)
				fs = append(fs, f)
			}
			if limit > 0 {
				f, err := s.Go(context.Background(), "waiting", func(context.Context) error { return nil })
				require.NoError(t, err)
				fs = append(fs, f)
			}
			release()
			awaitAll(t, fs...)
			other()
			awaitAll(t, og)
			require.NotZero(t, s.Stats().Yields)
			require.Empty(t, logs.String())
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the scheduler's goroutines to log
// into while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestSlowTasksAreLoggedAndCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		s, err := seqsched.New[string](seqsched.WithSlowTask(10*time.Millisecond),
			seqsched.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		require.NoError(t, err)
		sleep := func(d time.Duration) func(context.Context) error {
			return func(context.Context) error { time.Sleep(d); return nil }
		}
		fast, err := s.Go(context.Background(), "acct-1", sleep(10*time.Millisecond))
		require.NoError(t, err)
		slow, err := s.Go(context.Background(), "acct-1", sleep(25*time.Millisecond), seqsched.High)
		require.NoError(t, err)
		awaitAll(t, fast, slow)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, uint64(1), s.Stats().SlowTasks)
		out := logs.String()
		require.Equal(t, 1, strings.Count(out, "slow task"), out)
		require.Contains(t, out, "level=WARN")
		require.Contains(t, out, "priority=High")
		require.Contains(t, out, "duration=25ms")
		require.Contains(t, out, "session=acct-1")
	})
}

func TestWaitHistogramReportsQueueWaitsByPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[string](seqsched.WithWaitHistogram())
		require.NoError(t, err)
		// Submit later than New, so that a wait measured from anything but
		// the task's submit shows.
		time.Sleep(time.Second)
		work := func(context.Context) error { time.Sleep(10 * time.Millisecond); return nil }
		var fs []*seqsched.Future[struct{}]
		for i := range 10 { // waits 0, 20ms, 30ms, ... 100ms (the High task runs second)
			f, err := s.Go(context.Background(), "k", work)
			require.NoError(t, err)
			fs = append(fs, f)
			if i == 0 {
				synctest.Wait() // the first task is running
			}
		}
		h, err := s.Go(context.Background(), "k", work, seqsched.High) // waits 10ms
		require.NoError(t, err)
		synctest.Wait()
		st := s.Stats()
		require.Equal(t, 9, st.Normal.Queued)
		require.Equal(t, 1, st.High.Queued)
		awaitAll(t, append(fs, h)...)
		st = s.Stats()
		require.Equal(t, uint64(10), st.Normal.Completed)
		require.Equal(t, uint64(1), st.High.Completed)

		require.Equal(t, uint64(1), st.High.Wait.Count)
		require.Equal(t, 10*time.Millisecond, st.High.Wait.Max)
		require.Equal(t, 10*time.Millisecond, st.High.Wait.P99) // capped at Max

		require.Equal(t, uint64(10), st.Normal.Wait.Count)
		require.Equal(t, 100*time.Millisecond, st.Normal.Wait.Max)
		require.GreaterOrEqual(t, st.Normal.Wait.P50, 50*time.Millisecond)
		require.LessOrEqual(t, st.Normal.Wait.P50, 50*time.Millisecond*9/8)
		require.Equal(t, 100*time.Millisecond, st.Normal.Wait.P99)

		// One record of the waits: the histogram exporters read says the same.
		for _, ps := range []seqsched.PriorityStats{st.High, st.Normal} {
			require.Equal(t, ps.Wait.Count, ps.WaitHistogram.Count)
		}
		require.Equal(t, 10*time.Millisecond, st.High.WaitHistogram.Sum)
		require.Equal(t, uint64(1), st.High.WaitHistogram.Buckets[slices.Index(seqsched.HistogramBounds(), 10*time.Millisecond)])
		require.NoError(t, s.Shutdown(context.Background()))
	})
}

func TestWithoutWaitHistogramWaitsAreZero(t *testing.T) {
	s := newScheduler[string](t)
	awaitAll(t, record(t, s, new(recorder), "k", "x"))
	require.Equal(t, seqsched.WaitStats{}, s.Stats().Normal.Wait)
}

func TestHistogramBoundsCoverMicrosecondToMinute(t *testing.T) {
	b := seqsched.HistogramBounds()
	if len(b) != seqsched.HistogramBuckets-1 {
		t.Fatalf("len(bounds) = %d; want HistogramBuckets-1 = %d", len(b), seqsched.HistogramBuckets-1)
	}
	if b[0] != time.Microsecond || b[len(b)-1] != time.Minute {
		t.Fatalf("bounds run %v..%v; want 1µs..1m0s", b[0], b[len(b)-1])
	}
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] {
			t.Fatalf("bounds[%d] = %v <= bounds[%d] = %v; want ascending", i, b[i], i-1, b[i-1])
		}
	}
	b[0] = 0 // a copy: the next call is unchanged
	if seqsched.HistogramBounds()[0] != time.Microsecond {
		t.Fatal("HistogramBounds returned the package's own slice")
	}
}

// While a backlog's t2 runs, Stats counts t3..t20 queued and one session
// running, however many tasks the worker has taken off the lane; while its
// t12 runs, in the worker's second turn, t13..t20. Once quiet, every
// outcome is counted once.
func TestStatsCountEveryTaskNotYetStartedAsQueued(t *testing.T) {
	for _, at := range backlogGates {
		t.Run(fmt.Sprint("t", at), func(t *testing.T) {
			s := newScheduler[string](t)
			b := queueBacklogAt(t, s, "k", at, nil, nil)
			st := s.Stats()
			require.Equal(t, 1, st.Sessions)
			require.Equal(t, 1, st.Running)
			require.Equal(t, backlogLen-at, st.Queued)
			require.Equal(t, backlogLen-at, st.Normal.Queued)
			require.Zero(t, st.High.Queued)
			require.Equal(t, uint64(backlogLen+1), st.Submitted)

			b.release()
			awaitAll(t, b.fs...)
			st = s.Stats()
			require.Zero(t, st.Sessions)
			require.Zero(t, st.Running)
			require.Zero(t, st.Queued)
			require.Equal(t, uint64(backlogLen+1), st.Submitted)
			require.Equal(t, uint64(backlogLen+1), st.Completed)
			require.Equal(t, seqsched.Outcomes{Succeeded: backlogLen + 1}, st.Normal.Outcomes)
		})
	}
}
