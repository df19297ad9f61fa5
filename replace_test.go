// Replace: a task tagged Replace(tag) takes the place of its session's
// queued, unstarted task of the same priority and tag, which resolves with
// ErrReplaced without running; it never touches a running task, other
// tags or the other lane, and takes no room under WithMaxQueue.

package seqsched_test

import (
	"context"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

func TestReplaceTakesTheQueuedTasksPlace(t *testing.T) {
	s := newScheduler[string](t)
	release, g := gate(t, s, "k")
	var r recorder
	a := record(t, s, &r, "k", "a")
	p1 := record(t, s, &r, "k", "presence-1", seqsched.Replace("presence"))
	b := record(t, s, &r, "k", "b")
	p2 := record(t, s, &r, "k", "presence-2", seqsched.Replace("presence"))
	c := record(t, s, &r, "k", "c")
	p3 := record(t, s, &r, "k", "presence-3", seqsched.Replace("presence"))
	high, normal := s.Queued("k")
	require.Equal(t, [2]int{0, 4}, [2]int{high, normal}, "a replacement adds nothing to the queue")
	release()
	awaitAll(t, g, a, b, c, p3)
	require.Equal(t, []string{"a", "presence-3", "b", "c"}, r.get())
	for _, f := range []*seqsched.Future[struct{}]{p1, p2} {
		_, err := f.Await(context.Background())
		require.ErrorIs(t, err, seqsched.ErrReplaced)
	}
	st := s.Stats()
	require.Equal(t, uint64(2), st.Replaced)
	require.Equal(t, uint64(2), st.Normal.Outcomes.Replaced)
	require.Equal(t, st.Submitted, st.Completed)
}

func TestReplaceNeverTouchesARunningTaskOtherTagsOrTheOtherLane(t *testing.T) {
	s := newScheduler[string](t)
	release, g := gate(t, s, "k", seqsched.Replace("x")) // running: its tag is free
	var r recorder
	fs := []*seqsched.Future[struct{}]{
		record(t, s, &r, "k", "x1", seqsched.Replace("x")),
		record(t, s, &r, "k", "y1", seqsched.Replace("y")),
		record(t, s, &r, "k", "hx1", seqsched.Replace("x"), seqsched.High),
	}
	release()
	awaitAll(t, append(fs, g)...)
	require.Equal(t, []string{"hx1", "x1", "y1"}, r.get())
	require.Zero(t, s.Stats().Replaced)
}

func TestAReplacementTakesNoRoomUnderMaxQueue(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxQueue(1))
	release, g := gate(t, s, "k")
	var r recorder
	p1 := record(t, s, &r, "k", "p1", seqsched.Replace("p"))
	p2 := record(t, s, &r, "k", "p2", seqsched.Replace("p"))
	_, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
	require.ErrorIs(t, err, seqsched.ErrQueueFull)
	release()
	awaitAll(t, g, p2)
	_, err = p1.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrReplaced)
	require.Equal(t, []string{"p2"}, r.get())
}

func TestAReplacedPostIsReportedWithErrReplaced(t *testing.T) {
	var fl failures
	s := newScheduler[string](t, seqsched.WithErrorHandler(fl.handle))
	release, g := gate(t, s, "k")
	noop := func(context.Context) error { return nil }
	require.NoError(t, s.Post(context.Background(), "k", noop, seqsched.Replace("p")))
	require.NoError(t, s.Post(context.Background(), "k", noop, seqsched.Replace("p")))
	release()
	awaitAll(t, g)
	require.NoError(t, s.Remove(context.Background(), "k"))
	require.Equal(t, []error{seqsched.ErrReplaced}, fl.get("k"))
}

func TestAReplacedPostIsLoggedAtDebugWithoutAHandler(t *testing.T) {
	var r recorder
	s := newScheduler[string](t, seqsched.WithLogger(r.logger()))
	release, g := gate(t, s, "k")
	noop := func(context.Context) error { return nil }
	require.NoError(t, s.Post(context.Background(), "k", noop, seqsched.Replace("p")))
	require.NoError(t, s.Post(context.Background(), "k", noop, seqsched.Replace("p")))
	release()
	awaitAll(t, g)
	require.NoError(t, s.Remove(context.Background(), "k"))
	require.Equal(t, []string{"DEBUG seqsched: posted task failed"}, r.get())
}

func TestDiscardDropsTheReplacement(t *testing.T) {
	s := newScheduler[string](t)
	release, g := gate(t, s, "k")
	var r recorder
	p1 := record(t, s, &r, "k", "p1", seqsched.Replace("p"))
	p2 := record(t, s, &r, "k", "p2", seqsched.Replace("p"))
	done := make(chan error, 1)
	go func() { done <- s.Discard(context.Background(), "k") }()
	_, err := p2.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrDiscarded)
	_, err = p1.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrReplaced)
	release()
	require.NoError(t, <-done)
	awaitAll(t, g)
	require.Empty(t, r.get())
}

func TestReplaceWithAnEmptyTagIsRefused(t *testing.T) {
	s := newScheduler[string](t)
	_, err := s.Go(context.Background(), "k", func(context.Context) error { return nil }, seqsched.Replace(""))
	var oe *seqsched.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, `seqsched: Replace(""): must name a tag: invalid option`, err.Error())
}

func TestReplaceInAPausedSession(t *testing.T) {
	s := newScheduler[string](t)
	require.NoError(t, s.Pause("k"))
	var r recorder
	p1 := record(t, s, &r, "k", "p1", seqsched.Replace("p"))
	p2 := record(t, s, &r, "k", "p2", seqsched.Replace("p"))
	_, err := p1.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrReplaced, "resolved at once, paused or not")
	require.NoError(t, s.Resume("k"))
	awaitAll(t, p2)
	require.Equal(t, []string{"p2"}, r.get())
}

// Two Replace posts in a row to an idle key: the first has not started
// when the second comes (its session's goroutine had not taken it), so
// only the second runs.
func TestReplaceReplacesATaskItsGoroutineHasNotTaken(t *testing.T) {
	opt, entered, open := weightGate()
	s := newScheduler[string](t, opt)
	var r recorder
	first := record(t, s, &r, "k", "first", seqsched.Replace("t"))
	<-entered // k's goroutine runs, and has not taken first
	second := record(t, s, &r, "k", "second", seqsched.Replace("t"))
	close(open)
	awaitAll(t, second)
	_, err := first.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrReplaced)
	require.Equal(t, []string{"second"}, r.get())
}

// A tagged task queued in a backlog is replaced by a later one with its
// tag while t2 runs: it was queued until its session's goroutine ran it,
// however many tasks the worker had taken off the lane.
func TestReplaceTakesThePlaceOfATaskNotYetStarted(t *testing.T) {
	s := newScheduler[string](t)
	b := queueBacklog(t, s, "k", nil, func(i int) []seqsched.TaskOption {
		if i == 5 {
			return []seqsched.TaskOption{seqsched.Replace("x")}
		}
		return nil
	})
	newer := record(t, s, &b.r, "k", "newer", seqsched.Replace("x"))
	b.release()
	_, err := b.fs[4].Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrReplaced, "t5's future")
	awaitAll(t, append(append(b.fs[:4:4], b.fs[5:]...), newer)...)
	want := append(append(names(1, 4), "newer"), names(6, backlogLen)...)
	require.Equal(t, want, b.r.get(), "the newer task runs in t5's place; t5 never ran")
	st := s.Stats()
	require.Equal(t, uint64(1), st.Replaced)
	require.Equal(t, seqsched.Outcomes{Succeeded: backlogLen + 1, Replaced: 1}, st.Normal.Outcomes)
}
