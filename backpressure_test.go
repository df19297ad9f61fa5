// Backpressure: WithMaxQueue bounds the tasks a session holds queued (the
// running one not counted) and a submission beyond it fails at once with
// ErrQueueFull; Queued says how many tasks a key's next task waits behind.

package seqsched_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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

// WaitForRoom: a caller that finds its lane full waits for room instead of
// failing, and callers of one lane get room in the order they came.

func TestWaitForRoomGivesRoomInArrivalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[string](t, seqsched.WithMaxQueue(1))
		release, g := gate(t, s, "k")
		var r recorder
		first := record(t, s, &r, "k", "queued")
		results := make(chan error, 3)
		for i := range 3 {
			go func() {
				_, err := s.Go(context.Background(), "k", func(context.Context) error {
					r.add("w%d", i)
					return nil
				}, seqsched.WaitForRoom)
				results <- err
			}()
			synctest.Wait() // waiter i is in line before waiter i+1 comes
		}
		_, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
		require.ErrorIs(t, err, seqsched.ErrQueueFull, "a newcomer never overtakes the line")
		release()
		for range 3 {
			require.NoError(t, <-results)
		}
		awaitAll(t, g, first)
		require.NoError(t, s.Remove(context.Background(), "k"))
		require.Equal(t, []string{"queued", "w0", "w1", "w2"}, r.get())
	})
}

func TestWaitForRoomEndsWithItsCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[string](t, seqsched.WithMaxQueue(1))
		release, g := gate(t, s, "k")
		var r recorder
		first := record(t, s, &r, "k", "queued")
		ctx, cancel := context.WithCancel(context.Background())
		result := make(chan error, 1)
		go func() {
			_, err := s.Go(ctx, "k", func(context.Context) error { r.add("gave up"); return nil }, seqsched.WaitForRoom)
			result <- err
		}()
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-result, context.Canceled)
		release()
		awaitAll(t, g, first)
		require.NoError(t, s.Remove(context.Background(), "k"))
		require.Equal(t, []string{"queued"}, r.get(), "a waiter that gave up is not accepted")
		require.Equal(t, uint64(2), s.Stats().Submitted)
	})
}

func TestWaitForRoomIsRefusedWhenTheSessionOrSchedulerCloses(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(s *seqsched.Scheduler[string]) error
		want error
	}{
		{"Discard", func(s *seqsched.Scheduler[string]) error { return s.Discard(context.Background(), "k") }, seqsched.ErrSessionClosing},
		{"Close", func(s *seqsched.Scheduler[string]) error { return s.Close() }, seqsched.ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler[string](t, seqsched.WithMaxQueue(1))
				require.NoError(t, s.Pause("k"))
				_, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
				require.NoError(t, err)
				result := make(chan error, 1)
				go func() {
					_, err := s.Go(context.Background(), "k", func(context.Context) error { return nil }, seqsched.WaitForRoom)
					result <- err
				}()
				synctest.Wait()
				require.NoError(t, tc.end(s))
				require.ErrorIs(t, <-result, tc.want)
			})
		})
	}
}

func TestWaitForRoomInItsOwnSessionWouldDeadlock(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxQueue(1))
	f, err := s.Go(context.Background(), "k", func(ctx context.Context) error {
		if _, err := s.Go(ctx, "k", func(context.Context) error { return nil }); err != nil {
			return err
		}
		_, err := s.Go(ctx, "k", func(context.Context) error { return nil }, seqsched.WaitForRoom)
		return err
	})
	require.NoError(t, err)
	_, err = f.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrWouldDeadlock)
}

func TestWaitForRoomFromAnotherSessionLendsItsSlot(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxQueue(1), seqsched.WithMaxConcurrency(1))
	require.NoError(t, s.Pause("full"))
	_, err := s.Go(context.Background(), "full", func(context.Context) error { return nil })
	require.NoError(t, err)
	waiting := make(chan struct{})
	f, err := s.Go(context.Background(), "waiter", func(ctx context.Context) error {
		close(waiting)
		_, err := s.Go(ctx, "full", func(context.Context) error { return nil }, seqsched.WaitForRoom)
		return err
	})
	require.NoError(t, err)
	<-waiting
	// The one slot is lent while "waiter" waits: "other" runs, and Resume
	// lets "full" make room.
	var r recorder
	awaitAll(t, record(t, s, &r, "other", "other"))
	require.NoError(t, s.Resume("full"))
	awaitAll(t, f)
}

func TestWaitForRoomWithoutMaxQueueChangesNothing(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	awaitAll(t, record(t, s, &r, "k", "x", seqsched.WaitForRoom))
	require.Equal(t, []string{"x"}, r.get())
}

func TestAWaiterForRoomMayReplaceTheTaskOfItsTagAdmittedBeforeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[string](t, seqsched.WithMaxQueue(2))
		release, g := gate(t, s, "k")
		var r recorder
		x, y := record(t, s, &r, "k", "x"), record(t, s, &r, "k", "y") // the lane is full
		futures := [2]chan *seqsched.Future[struct{}]{make(chan *seqsched.Future[struct{}], 1), make(chan *seqsched.Future[struct{}], 1)}
		for i, name := range []string{"p1", "p2"} {
			go func() {
				f, err := s.Go(context.Background(), "k", func(context.Context) error { r.add("%s", name); return nil },
					seqsched.Replace("p"), seqsched.WaitForRoom)
				require.NoError(t, err)
				futures[i] <- f
			}()
			synctest.Wait() // p1 is in line before p2
		}
		// x leaves: p1 is admitted, tagged; y leaves: p2 is admitted in p1's place.
		release()
		p1, p2 := <-futures[0], <-futures[1]
		awaitAll(t, g, x, y, p2)
		_, err := p1.Await(context.Background())
		require.ErrorIs(t, err, seqsched.ErrReplaced)
		require.Equal(t, []string{"x", "y", "p2"}, r.get())
		require.Equal(t, uint64(1), s.Stats().Replaced)
	})
}

// countingCtx counts the calls of its methods.
type countingCtx struct {
	context.Context
	calls *atomic.Int64
}

func (c countingCtx) Deadline() (time.Time, bool) { c.calls.Add(1); return c.Context.Deadline() }
func (c countingCtx) Done() <-chan struct{}       { c.calls.Add(1); return c.Context.Done() }
func (c countingCtx) Err() error                  { c.calls.Add(1); return c.Context.Err() }
func (c countingCtx) Value(key any) any           { c.calls.Add(1); return c.Context.Value(key) }

// WaitForRoom into a lane with room reads no method of the ctx, as the doc
// says: like every wait, it reads ctx only when it has to wait.
func TestWaitForRoomIntoALaneWithRoomReadsNoCtx(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxQueue(1))
	release, g := gate(t, s, "k") // the lane behind it is empty: room for one
	t.Cleanup(release)            // before Shutdown's, if the test fails
	var calls atomic.Int64
	f, err := s.Go(countingCtx{context.Background(), &calls}, "k", func(context.Context) error { return nil }, seqsched.WaitForRoom)
	require.NoError(t, err)
	require.Zero(t, calls.Load(), "calls of the ctx's methods by Go")
	release()
	awaitAll(t, g, f)
}

// A task posted to an idle key waits until the key's goroutine takes it:
// Queued counts it until then, by key and through a handle, and it still
// runs once the goroutine goes on.
func TestQueuedCountsATaskPostedToAnIdleKeyBeforeItsGoroutineTakesIt(t *testing.T) {
	opt, entered, open := weightGate()
	s := newScheduler[string](t, opt)
	letGo := sync.OnceFunc(func() { close(open) })
	defer letGo() // a failed check still lets k's goroutine go on
	h, err := s.Open("k")
	require.NoError(t, err)
	f, err := h.Go(context.Background(), func(context.Context) error { return nil }, seqsched.High)
	require.NoError(t, err)
	<-entered // k's goroutine runs, and has not taken the task
	high, normal := s.Queued("k")
	require.Equal(t, [2]int{1, 0}, [2]int{high, normal}, "Queued(k) = (high, normal)")
	high, normal = h.Queued()
	require.Equal(t, [2]int{1, 0}, [2]int{high, normal}, "h.Queued() = (high, normal)")
	letGo()
	awaitAll(t, f)
	high, normal = h.Queued()
	require.Equal(t, [2]int{0, 0}, [2]int{high, normal}, "h.Queued() once the task ran")
	require.NoError(t, h.Close(context.Background()))
}

// While a backlog's t2 runs, Queued counts t3..t20, by key and through a
// handle, however many tasks the worker has taken off the lane; while its
// t12 runs, in the worker's second turn, t13..t20.
func TestQueuedCountsEveryTaskNotYetStarted(t *testing.T) {
	for _, at := range backlogGates {
		t.Run(fmt.Sprint("t", at), func(t *testing.T) {
			s := newScheduler[string](t)
			h, err := s.Open("k")
			require.NoError(t, err)
			b := queueBacklogAt(t, s, "k", at, nil, nil)
			high, normal := s.Queued("k")
			require.Equal(t, [2]int{0, backlogLen - at}, [2]int{high, normal}, "Scheduler.Queued")
			high, normal = h.Queued()
			require.Equal(t, [2]int{0, backlogLen - at}, [2]int{high, normal}, "Session.Queued")
			b.release()
			awaitAll(t, b.fs...)
			high, normal = h.Queued()
			require.Equal(t, [2]int{0, 0}, [2]int{high, normal})
			require.NoError(t, h.Close(context.Background()))
		})
	}
}
