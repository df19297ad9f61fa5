// Pacing: WithRate spaces the starts of a key's tasks by its token bucket,
// as x/time/rate's Limiter.Wait would; a paced session that waits holds no
// goroutine and no slot, only one timer, and never delays other keys.
// Tests run in a synctest bubble: time moves only when every goroutine
// waits, so the times asserted are exact.

package seqsched_test

import (
	"context"
	"math"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// startTimes submits n tasks to key and returns, once all ran, when each
// started, measured from the first submission.
func startTimes(t *testing.T, s *seqsched.Scheduler[string], key string, n int, opts ...seqsched.TaskOption) []time.Duration {
	t.Helper()
	begin := time.Now()
	got := make([]time.Duration, n)
	var fs []*seqsched.Future[struct{}]
	for i := range n {
		f, err := s.Go(context.Background(), key, func(context.Context) error {
			got[i] = time.Since(begin)
			return nil
		}, opts...)
		require.NoError(t, err)
		fs = append(fs, f)
	}
	awaitAll(t, fs...)
	return got
}

func tenPerSecondBurstTwo(key string) (float64, int) {
	if key == "free" {
		return 0, 0
	}
	return 10, 2
}

func TestRateSpacesAKeysTasksByItsBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[string](t, seqsched.WithRate(tenPerSecondBurstTwo))
		ms := time.Millisecond
		require.Equal(t, []time.Duration{0, 0, 100 * ms, 200 * ms, 300 * ms}, startTimes(t, s, "k", 5),
			"a burst of 2, then one task every 100 ms")
		time.Sleep(time.Second) // the bubble's clock: the bucket refills to its burst
		require.Equal(t, []time.Duration{0, 0, 100 * ms}, startTimes(t, s, "k", 3))
	})
}

func TestRateNeverDelaysOtherKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[string](t, seqsched.WithRate(tenPerSecondBurstTwo), seqsched.WithMaxConcurrency(1))
		var slow []*seqsched.Future[struct{}]
		for range 5 {
			f, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
			require.NoError(t, err)
			slow = append(slow, f)
		}
		synctest.Wait()
		st := s.Stats()
		require.Equal(t, 1, st.Paced, "the paced key waits on its timer")
		require.Zero(t, st.Running)
		// With one slot, "other" runs at once only if the paced key holds none.
		require.Equal(t, []time.Duration{0, 0}, startTimes(t, s, "other", 2))
		require.Equal(t, []time.Duration{0}, startTimes(t, s, "free", 1), "a key with rate 0 is not paced")
		awaitAll(t, slow...)
		require.Zero(t, s.Stats().Paced)
	})
}

func TestDiscardOfAPacedKeyStopsItsTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[string](t, seqsched.WithRate(func(string) (float64, int) { return 1, 1 }))
		var r recorder
		first := record(t, s, &r, "k", "first")
		second := record(t, s, &r, "k", "second")
		awaitAll(t, first)
		synctest.Wait()
		begin := time.Now()
		require.NoError(t, s.Discard(context.Background(), "k"))
		require.Zero(t, time.Since(begin), "Discard waits for no timer")
		_, err := second.Await(context.Background())
		require.ErrorIs(t, err, seqsched.ErrDiscarded)
		require.Equal(t, []string{"first"}, r.get())
		require.Zero(t, s.Stats().Paced)
	})
}

func TestShutdownWaitsForPacedTasksAndCloseDropsThem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[string](seqsched.WithRate(func(string) (float64, int) { return 1, 1 }))
		require.NoError(t, err)
		var r recorder
		fs := []*seqsched.Future[struct{}]{record(t, s, &r, "k", "a"), record(t, s, &r, "k", "b")}
		begin := time.Now()
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, time.Second, time.Since(begin), "Shutdown waits for the paced task's turn")
		awaitAll(t, fs...)

		s2, err := seqsched.New[string](seqsched.WithRate(func(string) (float64, int) { return 1, 1 }))
		require.NoError(t, err)
		a, b := record(t, s2, &r, "k", "a2"), record(t, s2, &r, "k", "b2")
		awaitAll(t, a)
		synctest.Wait()
		require.NoError(t, s2.Close())
		_, err = b.Await(context.Background())
		require.ErrorIs(t, err, seqsched.ErrClosed)
		require.NoError(t, s2.Shutdown(context.Background()))
	})
}

func TestPauseOfAPacedKeyHoldsItAfterItsTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[string](t, seqsched.WithRate(func(string) (float64, int) { return 1, 1 }))
		var r recorder
		awaitAll(t, record(t, s, &r, "k", "a"))
		b := record(t, s, &r, "k", "b")
		synctest.Wait()
		require.NoError(t, s.Pause("k"))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.False(t, resolved(b))
		require.True(t, s.Paused("k"))
		require.NoError(t, s.Resume("k"))
		awaitAll(t, b) // its token was taken: it starts at once
		require.Equal(t, []string{"a", "b"}, r.get())
	})
}

// A paused key that was waiting for its rate counts as paused, not paced,
// and once resumed its next task still waits for its bucket's token.
func TestStatsCountsAPausedKeyWaitingForItsRateAsPaused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[string](t, seqsched.WithRate(func(string) (float64, int) { return 1, 1 }))
		begin := time.Now()
		var r recorder
		awaitAll(t, record(t, s, &r, "k", "a"))
		var startedAt time.Duration
		b, err := s.Go(context.Background(), "k", func(context.Context) error { startedAt = time.Since(begin); return nil })
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, 1, s.Stats().Paced)
		require.NoError(t, s.Pause("k"))
		st := s.Stats()
		require.Equal(t, [2]int{1, 0}, [2]int{st.Paused, st.Paced}, "Paused, Paced of a paused key that waited for its rate")
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, s.Resume("k"))
		awaitAll(t, b)
		require.Equal(t, time.Second, startedAt, "resumed, it still waits for its token")
	})
}

// A rate so small that a task's wait would overflow a time.Duration waits
// as long as one holds: the key is paced, not run unpaced.
func TestARateTooSmallForADurationWaitsAsLongAsOneHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[string](t, seqsched.WithRate(func(string) (float64, int) { return 1e-11, 1 }))
		var r recorder
		awaitAll(t, record(t, s, &r, "k", "a"))
		b := record(t, s, &r, "k", "b")
		synctest.Wait()
		require.False(t, resolved(b), "the second task waits for a token")
		require.Equal(t, 1, s.Stats().Paced)
		require.NoError(t, s.Discard(context.Background(), "k"))
		_, err := b.Await(context.Background())
		require.ErrorIs(t, err, seqsched.ErrDiscarded)
		require.Equal(t, []string{"a"}, r.get())
	})
}

func TestRateOutOfRangeOrPanickingIsLoggedOnceAndUnpaced(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(string) (float64, int)
		want string
	}{
		{"negative", func(string) (float64, int) { return -1, 1 }, "ERROR seqsched: WithRate out of range; key not paced (logged once)"},
		{"NaN", func(string) (float64, int) { return math.NaN(), 1 }, "ERROR seqsched: WithRate out of range; key not paced (logged once)"},
		{"burst 0", func(string) (float64, int) { return 5, 0 }, "ERROR seqsched: WithRate out of range; key not paced (logged once)"},
		{"panic", func(string) (float64, int) { panic("rate") }, "ERROR seqsched: WithRate panicked; key not paced"},
		{"goexit", func(string) (float64, int) { runtime.Goexit(); return 1, 1 }, "ERROR seqsched: WithRate called runtime.Goexit; key not paced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var r recorder
				s := newScheduler[string](t, seqsched.WithRate(tc.f), seqsched.WithLogger(r.logger()))
				require.Equal(t, []time.Duration{0, 0, 0}, startTimes(t, s, "a", 3))
				require.Equal(t, []time.Duration{0}, startTimes(t, s, "b", 1))
				require.Equal(t, []string{tc.want}, r.get())
			})
		})
	}
}

func TestRateOfAnotherKeyTypeIsRefused(t *testing.T) {
	_, err := seqsched.New[string](seqsched.WithRate(func(int) (float64, int) { return 1, 1 }))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
	_, err = seqsched.New[string](seqsched.WithRate[string](nil))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
}
