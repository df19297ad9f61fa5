package seqsched_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/assert"
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

func TestRemoveDrainsAcceptedTasksThenForgetsSession(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	release, g := gate(t, s, "k")
	fs := []*seqsched.Future[struct{}]{
		record(t, s, &r, "k", "n1"),
		record(t, s, &r, "k", "h1", seqsched.High),
	}
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(context.Background(), "k") }()

	// Wait until Remove has taken effect: Submit starts failing.
	for {
		_, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
		if errors.Is(err, seqsched.ErrSessionClosing) {
			break
		}
		require.NoError(t, err) // accepted before Remove: part of the drain
		select {
		case err := <-removed:
			t.Fatalf("Remove returned %v before the gate opened", err)
		default:
		}
	}
	release()
	require.NoError(t, <-removed)
	awaitAll(t, append(fs, g)...)
	require.Equal(t, []string{"h1", "n1"}, r.get())
	require.Zero(t, s.Stats().Sessions)

	// The key is fresh again.
	awaitAll(t, record(t, s, &r, "k", "fresh"))
	require.Equal(t, []string{"h1", "n1", "fresh"}, r.get())
}

func TestRemoveReturnsContextErrorAndDrainCompletes(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	release, g := gate(t, s, "k")
	f := record(t, s, &r, "k", "queued")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Remove(ctx, "k"), context.Canceled)
	_, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
	require.ErrorIs(t, err, seqsched.ErrSessionClosing, "the drain goes on after Remove gave up waiting")
	release()
	awaitAll(t, g, f)
	require.NoError(t, s.Remove(context.Background(), "k"))
	require.Equal(t, []string{"queued"}, r.get())
	awaitAll(t, record(t, s, &r, "k", "fresh"))
}

func TestRemoveUnknownOrIdleKeyReturnsNil(t *testing.T) {
	s := newScheduler[string](t)
	require.NoError(t, s.Remove(context.Background(), "never seen"))
	var r recorder
	awaitAll(t, record(t, s, &r, "idle", "x"))
	require.NoError(t, s.Remove(context.Background(), "idle"))
}

func TestRemoveSameKeyConcurrently(t *testing.T) {
	s := newScheduler[int](t)
	release, g := gate(t, s, 1)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Remove(context.Background(), 1)
		}()
	}
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	awaitAll(t, g)
	require.Zero(t, s.Stats().Sessions)
}

func TestRemoveOwnSessionFromTaskReturnsErrWouldDeadlock(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	f, err := s.Go(context.Background(), "k", func(ctx context.Context) error {
		err := s.Remove(ctx, "k")
		_, submitErr := s.Go(ctx, "k", func(context.Context) error { return nil })
		r.add("remove: %v; submit: %v", err, submitErr)
		return nil
	})
	require.NoError(t, err)
	awaitAll(t, f)
	require.Equal(t, []string{`remove: seqsched: would deadlock; submit: seqsched: session "k": closing`}, r.get())
	awaitAll(t, record(t, s, &r, "k", "fresh"))
}

func TestShutdownRunsAcceptedTasksAndRejectsNewOnes(t *testing.T) {
	s, err := seqsched.New[string](seqsched.WithMaxConcurrency(1))
	require.NoError(t, err)
	var r recorder
	release, g := gate(t, s, "a")
	fs := []*seqsched.Future[struct{}]{record(t, s, &r, "a", "a1"), record(t, s, &r, "b", "b1")}
	var inner error
	fs = append(fs, recordErr(t, s, "b", func(ctx context.Context) error {
		_, inner = s.Go(ctx, "b", func(context.Context) error { return nil })
		return nil
	}))

	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	for {
		_, err := s.Go(context.Background(), "c", func(context.Context) error { return nil })
		if errors.Is(err, seqsched.ErrClosed) {
			break
		}
		require.NoError(t, err)
	}
	release()
	require.NoError(t, <-done)
	awaitAll(t, append(fs, g)...)
	require.Equal(t, []string{"a1", "b1"}, r.get())
	require.ErrorIs(t, inner, seqsched.ErrClosed, "tasks cannot add work during Shutdown")
	require.NoError(t, s.Shutdown(context.Background()), "second Shutdown")
	st := s.Stats()
	require.Zero(t, st.Sessions)
	require.Equal(t, st.Submitted, st.Completed)
}

func recordErr(t *testing.T, s *seqsched.Scheduler[string], key string, fn func(context.Context) error) *seqsched.Future[struct{}] {
	t.Helper()
	f, err := s.Go(context.Background(), key, fn)
	require.NoError(t, err)
	return f
}

func TestShutdownGivesUpWhenContextEnds(t *testing.T) {
	s, err := seqsched.New[string](seqsched.WithMaxConcurrency(2))
	require.NoError(t, err)
	started := make(chan struct{})
	var sawCancel error
	running := recordErr(t, s, "a", func(ctx context.Context) error {
		close(started)
		<-ctx.Done() // only a forced Shutdown ends this task
		sawCancel = ctx.Err()
		return nil
	})
	<-started
	release, g := gate(t, s, "b")
	var r recorder
	queued := []*seqsched.Future[struct{}]{
		record(t, s, &r, "a", "a queued"),
		record(t, s, &r, "b", "b queued"),
		record(t, s, &r, "c", "c waits for a slot"),
	}
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(context.Background(), "c") }()
	for {
		f, err := s.Go(context.Background(), "c", func(context.Context) error { r.add("c probe"); return nil })
		if errors.Is(err, seqsched.ErrSessionClosing) {
			break // Remove is waiting
		}
		require.NoError(t, err)
		queued = append(queued, f)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Shutdown(ctx), context.Canceled)
	for i, f := range queued {
		_, err := f.Await(context.Background())
		require.ErrorIs(t, err, seqsched.ErrClosed, "queued task %d", i)
	}
	awaitAll(t, running)
	require.ErrorIs(t, sawCancel, context.Canceled)
	release()
	awaitAll(t, g)
	require.NoError(t, s.Shutdown(context.Background()), "a later Shutdown waits for the goroutines")
	require.Empty(t, r.get(), "no task may start after Shutdown gave up")
	require.ErrorIs(t, <-removed, seqsched.ErrClosed)
	st := s.Stats()
	n := uint64(len(queued))
	assert.Equal(t, seqsched.Stats{Submitted: 2 + n, Completed: 2 + n, Skipped: n,
		Normal: seqsched.PriorityStats{Completed: 2 + n, Outcomes: seqsched.Outcomes{Succeeded: 2, Skipped: n}}}, st)
}

func TestShutdownConcurrentCallsAllReturn(t *testing.T) {
	s, err := seqsched.New[int]()
	require.NoError(t, err)
	release, g := gate(t, s, 1)
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- s.Shutdown(context.Background()) }()
	}
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	awaitAll(t, g)
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  seqsched.Option
		want string
	}{
		{seqsched.WithYieldAfter(9), "seqsched: WithYieldAfter(9): must be 10..50: invalid option"},
		{seqsched.WithYieldAfter(51), "seqsched: WithYieldAfter(51): must be 10..50: invalid option"},
		{seqsched.WithMaxConcurrency(-1), "seqsched: WithMaxConcurrency(-1): must be >= 0 (0 means no limit): invalid option"},
		{seqsched.WithMaxQueue(-3), "seqsched: WithMaxQueue(-3): must be >= 0 (0 means no limit): invalid option"},
		{seqsched.WithLogger(nil), "seqsched: WithLogger(nil): must not be nil (pass slog.New(slog.DiscardHandler) to discard logs): invalid option"},
		{nil, "seqsched: option 0: must not be nil: invalid option"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			s, err := seqsched.New[int](tc.opt)
			require.Nil(t, s)
			require.ErrorIs(t, err, seqsched.ErrInvalidOption)
			var oerr *seqsched.OptionError
			require.ErrorAs(t, err, &oerr)
			require.EqualError(t, err, tc.want)
		})
	}
}

func TestNewAcceptsBoundaryOptions(t *testing.T) {
	for _, opt := range []seqsched.Option{
		seqsched.WithYieldAfter(10), seqsched.WithYieldAfter(50),
		seqsched.WithMaxConcurrency(0), seqsched.WithMaxQueue(0),
		seqsched.WithLogger(slog.Default()),
	} {
		s, err := seqsched.New[int](opt)
		require.NoError(t, err, "%v", opt)
		require.NoError(t, s.Shutdown(context.Background()))
	}
}

func TestSubmitRejectsBadInput(t *testing.T) {
	s := newScheduler[string](t)
	_, err := seqsched.Submit[string, int](context.Background(), s, "k", nil)
	require.ErrorIs(t, err, seqsched.ErrNilFunc)
	_, err = s.Go(context.Background(), "k", nil)
	require.ErrorIs(t, err, seqsched.ErrNilFunc)
	noop := func(context.Context) error { return nil }
	//nolint:staticcheck // a nil ctx is the bad input under test
	_, err = s.Go(nil, "k", noop)
	require.ErrorIs(t, err, seqsched.ErrNilContext)
	_, err = s.Go(context.Background(), "k", noop, seqsched.Priority(7))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
	require.EqualError(t, err, "seqsched: Priority(7): must be Normal or High: invalid option")
	_, err = s.Go(context.Background(), "k", noop, nil)
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)

	var zero seqsched.Scheduler[string]
	_, err = zero.Go(context.Background(), "k", noop)
	require.ErrorIs(t, err, seqsched.ErrNotNew)
	require.ErrorIs(t, zero.Remove(context.Background(), "k"), seqsched.ErrNotNew)
	require.ErrorIs(t, zero.Shutdown(context.Background()), seqsched.ErrNotNew)
	require.Equal(t, seqsched.Stats{}, zero.Stats())
	var none *seqsched.Scheduler[string]
	_, err = none.Go(context.Background(), "k", noop)
	require.ErrorIs(t, err, seqsched.ErrNotNew)
	require.ErrorIs(t, none.Remove(context.Background(), "k"), seqsched.ErrNotNew)
	require.ErrorIs(t, none.Shutdown(context.Background()), seqsched.ErrNotNew)
	require.ErrorIs(t, none.Post(context.Background(), "k", noop), seqsched.ErrNotNew)
	_, err = none.Open("k")
	require.ErrorIs(t, err, seqsched.ErrNotNew)
	var oerr *seqsched.OptionError
	require.False(t, errors.As(err, &oerr), "a zero Scheduler is no bad option")
	var nilHandle *seqsched.Session[string]
	_, err = nilHandle.Go(context.Background(), noop)
	require.ErrorIs(t, err, seqsched.ErrNotNew)
	require.ErrorIs(t, nilHandle.Post(context.Background(), noop), seqsched.ErrNotNew)
	require.ErrorIs(t, nilHandle.Close(context.Background()), seqsched.ErrNotNew)
	require.Equal(t, seqsched.Stats{}, none.Stats())
	require.Zero(t, s.Stats().Submitted, "rejected tasks must leave no trace")
}

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
