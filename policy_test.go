package seqsched_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// chain submits on keys[0] a task that submits on keys[1] a task that ...
// awaits the next, and returns the outer future. runnable counts tasks that
// run outside an Await; peak records its maximum.
func chain(t testing.TB, s *seqsched.Scheduler[string], keys []string, runnable, peak *atomic.Int32) *seqsched.Future[string] {
	t.Helper()
	enter := func() {
		n := runnable.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
	}
	var link func(i int) func(context.Context) (string, error)
	link = func(i int) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			enter()
			defer runnable.Add(-1)
			if i == len(keys)-1 {
				return keys[i], nil
			}
			next, err := seqsched.Submit(ctx, s, keys[i+1], link(i+1))
			if err != nil {
				return "", err
			}
			runnable.Add(-1)
			v, err := next.Await(ctx)
			enter()
			return keys[i] + v, err
		}
	}
	f, err := seqsched.Submit(context.Background(), s, keys[0], link(0))
	require.NoError(t, err)
	return f
}

func TestAwaitChainCompletesUnderMaxConcurrencyOne(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	var runnable, peak atomic.Int32
	v, err := chain(t, s, []string{"A", "B", "C"}, &runnable, &peak).Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, "ABC", v)
	require.Equal(t, int32(1), peak.Load(), "more runnable tasks than slots")
}

func TestHundredAwaitChainsCompleteUnderMaxConcurrencyTwo(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(2))
	var runnable, peak atomic.Int32
	var fs []*seqsched.Future[string]
	for i := range 100 {
		keys := []string{fmt.Sprint("a", i%7), fmt.Sprint("b", i%5), fmt.Sprint("c", i%3)}
		fs = append(fs, chain(t, s, keys, &runnable, &peak))
	}
	for i, f := range fs {
		v, err := f.Await(context.Background())
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint("a", i%7, "b", i%5, "c", i%3), v)
	}
	require.LessOrEqual(t, peak.Load(), int32(2), "more runnable tasks than slots")
}

func TestAwaitingSessionRunsNoOtherTaskWhileItsSlotIsLent(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	var r recorder
	a1, err := s.Go(context.Background(), "A", func(ctx context.Context) error {
		r.add("a1 start")
		// Queued behind a1 on A: must not start while a1 awaits.
		if _, err := s.Go(ctx, "A", func(context.Context) error { r.add("a2"); return nil }); err != nil {
			return err
		}
		b, err := s.Go(ctx, "B", func(context.Context) error { r.add("b1"); return nil })
		if err != nil {
			return err
		}
		_, err = b.Await(ctx)
		r.add("a1 end")
		return err
	})
	require.NoError(t, err)
	awaitAll(t, a1)
	require.NoError(t, s.Remove(context.Background(), "A")) // a2 done too
	require.Equal(t, []string{"a1 start", "b1", "a1 end", "a2"}, r.get())
}

// backFromAwaitWhileSlotHeld, inside a synctest bubble, makes a scheduler
// with one slot where a1 (session A) awaits b1 (session B), and b2, queued
// on B behind b1, keeps B's turn and so the slot until open is closed. The
// sessions named in others each get a task, submitted before the Await, that
// waits behind B in the ready queue. It returns once a1 is back from its
// Await and waits for the slot; r records the tasks' events.
func backFromAwaitWhileSlotHeld(t *testing.T, r *recorder, open chan struct{}, others ...string) (*seqsched.Scheduler[string], *seqsched.Future[struct{}]) {
	t.Helper()
	s, err := seqsched.New[string](seqsched.WithMaxConcurrency(1))
	require.NoError(t, err)
	a1, err := s.Go(context.Background(), "A", func(ctx context.Context) error {
		r.add("a1 start")
		b1, err := s.Go(ctx, "B", func(context.Context) error { r.add("b1"); return nil })
		if err != nil {
			return err
		}
		if _, err := s.Go(ctx, "B", func(context.Context) error { <-open; r.add("b2"); return nil }); err != nil {
			return err
		}
		for _, key := range others {
			if _, err := s.Go(ctx, key, func(context.Context) error { r.add("%s", key); return nil }); err != nil {
				return err
			}
		}
		_, err = b1.Await(ctx)
		r.add("a1 end")
		return err
	})
	require.NoError(t, err)
	synctest.Wait()
	require.Equal(t, []string{"a1 start", "b1"}, r.get())
	return s, a1
}

func TestTaskBackFromAwaitGoesAheadOfWaitingSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		open := make(chan struct{})
		// C and D have not started: they wait behind B in the ready queue.
		s, a1 := backFromAwaitWhileSlotHeld(t, &r, open, "C", "D")
		close(open)
		awaitAll(t, a1)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, []string{"a1 start", "b1", "b2", "a1 end", "C", "D"}, r.get())
	})
}

// After a forced Shutdown nobody may hand a slot on (here B's task ignores
// its ctx), so a task back from an Await runs on without one rather than
// wait: two tasks then run under WithMaxConcurrency(1), as documented.
func TestForcedShutdownLetsTaskBackFromAwaitRunWithoutSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		open := make(chan struct{})
		s, a1 := backFromAwaitWhileSlotHeld(t, &r, open)

		gaveUp, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, s.Shutdown(gaveUp), context.Canceled)
		synctest.Wait() // a1 has finished; b2 still holds the slot
		require.Equal(t, []string{"a1 start", "b1", "a1 end"}, r.get())
		awaitAll(t, a1)

		close(open)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, []string{"a1 start", "b1", "a1 end", "b2"}, r.get())
	})
}

// An Await with the task's ctx may run on a goroutine of the task's own. If
// it is back from its wait, queued for a slot, when fn returns, it no longer
// needs one: it returns at once, and the worker takes the slot back itself.
func TestAwaitOnTasksOtherGoroutineReturnsWhenTaskEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[string](seqsched.WithMaxConcurrency(1))
		require.NoError(t, err)
		var r recorder
		open := make(chan struct{})   // b2 keeps B's turn, and so the slot, until then
		finish := make(chan struct{}) // a1's fn returns then
		awaited := make(chan error, 1)
		a1, err := s.Go(context.Background(), "A", func(ctx context.Context) error {
			b1, err := goRecorded(ctx, s, &r, "B", "b1", nil)
			if err != nil {
				return err
			}
			if _, err := goRecorded(ctx, s, &r, "B", "b2", open); err != nil {
				return err
			}
			go func() {
				_, err := b1.Await(ctx)
				r.add("await back")
				awaited <- err
			}()
			<-finish
			r.add("a1 end")
			return nil
		})
		require.NoError(t, err)
		synctest.Wait() // b1 has run; its Await waits for the slot b2 holds
		require.Equal(t, []string{"b1"}, r.get())

		close(finish)
		synctest.Wait() // a1's worker now waits for the slot
		require.Equal(t, []string{"b1", "a1 end", "await back"}, r.get())
		require.NoError(t, <-awaited)

		close(open)
		awaitAll(t, a1)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, []string{"b1", "a1 end", "await back", "b2"}, r.get())
	})
}

// goRecorded submits from a task, under its ctx, a task on key that waits
// for open (if not nil) and then records name.
func goRecorded(ctx context.Context, s *seqsched.Scheduler[string], r *recorder, key, name string, open <-chan struct{}) (*seqsched.Future[struct{}], error) {
	return s.Go(ctx, key, func(context.Context) error {
		if open != nil {
			<-open
		}
		r.add("%s", name)
		return nil
	})
}

// awaited is a future to await and the name it is recorded by.
type awaited struct {
	name string
	f    *seqsched.Future[struct{}]
}

// awaitBoth awaits first and second under ctx on two goroutines, the second
// once startSecond is closed (nil: at once), records "<name> awaited" as
// each returns and "a end" after both, and returns their errors.
func awaitBoth(ctx context.Context, r *recorder, first, second awaited, startSecond <-chan struct{}) error {
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, a := range []awaited{first, second} {
		if i == 1 && startSecond != nil {
			<-startSecond
		}
		wg.Go(func() { _, errs[i] = a.f.Await(ctx); r.add("%s awaited", a.name) })
	}
	wg.Wait()
	r.add("a end")
	return errors.Join(errs...)
}

// A task's slot stays lent while any of its Awaits is in progress. Here A's
// task awaits b1 and, once startSecond is closed, c1, on two goroutines.
// The first Await is back and waits to take the slot back (b2 holds B's
// turn, and the slot, until openB is closed) when the second begins: the
// first returns at once, the slot stays lent, and c1 gets it when B's turn
// ends. Were the slot taken back then, c1 could never run with one slot.
func TestSlotStaysLentWhileAnyAwaitOfTheTaskWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[string](seqsched.WithMaxConcurrency(1))
		require.NoError(t, err)
		var r recorder
		openB, startSecond := make(chan struct{}), make(chan struct{})
		a, err := s.Go(context.Background(), "A", func(ctx context.Context) error {
			b1, err := goRecorded(ctx, s, &r, "B", "b1", nil)
			if err != nil {
				return err
			}
			if _, err := goRecorded(ctx, s, &r, "B", "b2", openB); err != nil {
				return err
			}
			c1, err := goRecorded(ctx, s, &r, "C", "c1", nil)
			if err != nil {
				return err
			}
			return awaitBoth(ctx, &r, awaited{"b1", b1}, awaited{"c1", c1}, startSecond)
		})
		require.NoError(t, err)
		synctest.Wait() // b1 has run; its Await waits for the slot b2 holds
		require.Equal(t, []string{"b1"}, r.get())

		close(startSecond)
		synctest.Wait()
		require.Equal(t, []string{"b1", "b1 awaited"}, r.get())

		close(openB)
		awaitAll(t, a)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, []string{"b1", "b1 awaited", "b2", "c1", "c1 awaited", "a end"}, r.get())
	})
}

// Of two Awaits of one task that both lent the slot, the first back
// returns at once; the last takes the slot back. With one slot, C's task,
// which the other Await waits for, could never run otherwise.
func TestLastOfATasksAwaitsTakesTheSlotBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[string](seqsched.WithMaxConcurrency(1))
		require.NoError(t, err)
		var r recorder
		openB1, openC1 := make(chan struct{}), make(chan struct{})
		a, err := s.Go(context.Background(), "A", func(ctx context.Context) error {
			var fs []*seqsched.Future[struct{}]
			for _, key := range []string{"B", "C"} {
				open := openB1
				if key == "C" {
					open = openC1
				}
				f, err := s.Go(ctx, key, func(context.Context) error {
					r.add("%s start", key)
					<-open
					return nil
				})
				if err != nil {
					return err
				}
				fs = append(fs, f)
			}
			return awaitBoth(ctx, &r, awaited{"B", fs[0]}, awaited{"C", fs[1]}, nil)
		})
		require.NoError(t, err)
		synctest.Wait() // both Awaits lent the slot; B runs
		require.Equal(t, []string{"B start"}, r.get())
		close(openB1)
		synctest.Wait() // the first Await returned; C has the slot
		require.ElementsMatch(t, []string{"B start", "B awaited", "C start"}, r.get())
		close(openC1)
		awaitAll(t, a)
		require.NoError(t, s.Shutdown(context.Background()))
		require.Equal(t, []string{"C awaited", "a end"}, r.get()[3:])
	})
}

// However a task's Awaits overlap, it takes back one slot and gives back
// one. Here the second Await ends while the first still waits to take the
// slot back: B keeps the slot from b1 to b4, and X holds the other one.
// Afterwards both slots of WithMaxConcurrency(2) are free.
func TestOverlappingAwaitsOfOneTaskLeaveEverySlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[string](seqsched.WithMaxConcurrency(2))
		require.NoError(t, err)
		releaseX, x := gate(t, s, "X")
		var r recorder
		openB2, openB4, startSecond := make(chan struct{}), make(chan struct{}), make(chan struct{})
		a, err := s.Go(context.Background(), "A", func(ctx context.Context) error {
			var fs [4]*seqsched.Future[struct{}]
			for i, open := range []chan struct{}{nil, openB2, nil, openB4} {
				f, err := goRecorded(ctx, s, &r, "B", fmt.Sprint("b", i+1), open)
				if err != nil {
					return err
				}
				fs[i] = f
			}
			return awaitBoth(ctx, &r, awaited{"b1", fs[0]}, awaited{"b3", fs[2]}, startSecond)
		})
		require.NoError(t, err)
		synctest.Wait() // b1 has run; its Await waits for a slot (X and B hold them)
		close(startSecond)
		synctest.Wait()
		close(openB2)
		synctest.Wait() // b3 has run; its Await waits for a slot
		close(openB4)
		synctest.Wait()
		releaseX()
		awaitAll(t, a, x)
		require.Equal(t, []string{"b1", "b1 awaited", "b2", "b3", "b4", "b3 awaited", "a end"}, r.get())

		// Two sessions now run at once.
		open := make(chan struct{})
		var started atomic.Int32
		var fs []*seqsched.Future[struct{}]
		for _, key := range []string{"Y", "Z"} {
			f, err := s.Go(context.Background(), key, func(context.Context) error { started.Add(1); <-open; return nil })
			require.NoError(t, err)
			fs = append(fs, f)
		}
		synctest.Wait()
		require.Equal(t, int32(2), started.Load())
		close(open)
		awaitAll(t, fs...)
		require.NoError(t, s.Shutdown(context.Background()))
	})
}

func TestYieldIntervalEndsTurnsByTime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		task    time.Duration // each task's duration, on the bubble's clock
		perTurn int
	}{
		{"past d", 3 * time.Millisecond, 4},    // 3 tasks take 9ms, the 4th ends the turn at 12ms
		{"exactly d", 5 * time.Millisecond, 2}, // the 2nd ends the turn at 10ms: it has lasted d
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, err := seqsched.New[string](seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(50),
					seqsched.WithYieldInterval(10*time.Millisecond))
				require.NoError(t, err)
				var r recorder
				open := make(chan struct{})
				g, err := s.Go(context.Background(), "gate", func(context.Context) error { <-open; return nil })
				require.NoError(t, err)
				var fs []*seqsched.Future[struct{}]
				for _, key := range []string{"A", "B"} {
					for range 12 {
						f, err := s.Go(context.Background(), key, func(context.Context) error {
							time.Sleep(tc.task)
							r.add("%s", key)
							return nil
						})
						require.NoError(t, err)
						fs = append(fs, f)
					}
				}
				close(open)
				awaitAll(t, append(fs, g)...)
				turns := 12 / tc.perTurn
				var want []string
				for range turns {
					want = append(append(want, repeat("A", tc.perTurn)...), repeat("B", tc.perTurn)...)
				}
				require.Equal(t, want, r.get())
				// A and B yield after every turn but the last, which empties them.
				require.Equal(t, uint64(2*(turns-1)), s.Stats().Yields)
				require.NoError(t, s.Shutdown(context.Background()))
			})
		})
	}
}

func TestWeightsShareSlotInProportion(t *testing.T) {
	weights := map[string]int{"premium": 3, "basic": 1}
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(10),
		seqsched.WithWeight(func(key string) int { return weights[key] }))
	release, g := gate(t, s, "gate")
	var mu sync.Mutex
	var order []string
	var fs []*seqsched.Future[struct{}]
	for _, key := range []string{"premium", "basic"} {
		for range 10000 {
			f, err := s.Go(context.Background(), key, func(context.Context) error {
				mu.Lock()
				order = append(order, key)
				mu.Unlock()
				return nil
			})
			require.NoError(t, err)
			fs = append(fs, f)
		}
	}
	release()
	awaitAll(t, append(fs, g)...)
	counts := map[string]int{}
	for _, key := range order[:10000] { // both saturated throughout
		counts[key]++
	}
	ratio := float64(counts["premium"]) / float64(counts["basic"])
	require.InDelta(t, 3.0, ratio, 3.0*0.05, "premium:basic = %d:%d", counts["premium"], counts["basic"])
	want := append(repeat("premium", 30), repeat("basic", 10)...)
	require.Equal(t, want, order[:40], "a turn is yieldAfter × weight tasks")
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestOutOfRangeWeightCountsAsOneAndIsLoggedOnce(t *testing.T) {
	var logs bytes.Buffer
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1),
		seqsched.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		seqsched.WithWeight(func(key string) int {
			if key == "A" {
				return 0
			}
			return 1000
		}))
	var r recorder
	release, g := gate(t, s, "gate")
	var fs []*seqsched.Future[struct{}]
	for _, key := range []string{"A", "B"} {
		for range 20 {
			fs = append(fs, record(t, s, &r, key, key))
		}
	}
	release()
	awaitAll(t, append(fs, g)...)
	want := append(append(append(repeat("A", 10), repeat("B", 10)...), repeat("A", 10)...), repeat("B", 10)...)
	require.Equal(t, want, r.get())
	require.Equal(t, 1, strings.Count(logs.String(), "WithWeight"), logs.String())
}

func TestBoundaryWeightsAreTakenAsGiven(t *testing.T) {
	var logs bytes.Buffer
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(10),
		seqsched.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		seqsched.WithWeight(func(key string) int {
			if key == "max" {
				return seqsched.MaxWeight
			}
			return seqsched.MinWeight
		}))
	var r recorder
	release, g := gate(t, s, "gate")
	long := 10 * seqsched.MaxWeight // one turn of "max"
	var fs []*seqsched.Future[struct{}]
	for range long + 1 {
		fs = append(fs, record(t, s, &r, "max", "max"))
	}
	for range 11 {
		fs = append(fs, record(t, s, &r, "min", "min"))
	}
	release()
	awaitAll(t, append(fs, g)...)
	want := append(append(repeat("max", long), repeat("min", 10)...), "max", "min")
	require.Equal(t, want, r.get())
	require.Empty(t, logs.String())
}

func TestWeightKeyTypeMustMatchScheduler(t *testing.T) {
	_, err := seqsched.New[int](seqsched.WithWeight(func(string) int { return 1 }))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
	require.EqualError(t, err, "seqsched: WithWeight(func(string) int): must take the scheduler's key type int: invalid option")
	_, err = seqsched.New[int](seqsched.WithWeight[int](nil))
	require.ErrorIs(t, err, seqsched.ErrInvalidOption)
}

func TestHighBurstLetsOneNormalThroughAfterNHigh(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithHighBurst(2))
	var r recorder
	release, g := gate(t, s, "k")
	var fs []*seqsched.Future[struct{}]
	for i := 1; i <= 3; i++ {
		fs = append(fs, record(t, s, &r, "k", fmt.Sprint("N", i)))
	}
	for i := 1; i <= 5; i++ {
		fs = append(fs, record(t, s, &r, "k", fmt.Sprint("H", i), seqsched.High))
	}
	release()
	awaitAll(t, append(fs, g)...)
	require.Equal(t, []string{"H1", "H2", "N1", "H3", "H4", "N2", "H5", "N3"}, r.get())
}

func TestHighBurstIsStrictHighFirstWhenNoNormalWaits(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithHighBurst(1))
	var r recorder
	release, g := gate(t, s, "k")
	var fs []*seqsched.Future[struct{}]
	for i := 1; i <= 3; i++ {
		fs = append(fs, record(t, s, &r, "k", fmt.Sprint("H", i), seqsched.High))
	}
	fs = append(fs, record(t, s, &r, "k", "N1"))
	release()
	awaitAll(t, append(fs, g)...)
	require.Equal(t, []string{"H1", "N1", "H2", "H3"}, r.get())
}

// The first task of an idle session goes straight to the goroutine that
// Submit starts, without waiting in a queue; a High one still counts
// towards the burst.
func TestHighBurstCountsTheHighTaskThatStartsTheSession(t *testing.T) {
	for _, opts := range [][]seqsched.Option{
		{seqsched.WithHighBurst(1)},
		{seqsched.WithHighBurst(1), seqsched.WithMaxConcurrency(1)},
	} {
		t.Run(fmt.Sprint(opts), func(t *testing.T) {
			s := newScheduler[string](t, opts...)
			var r recorder
			release, h0 := gate(t, s, "k", seqsched.High) // starts the session
			fs := []*seqsched.Future[struct{}]{
				record(t, s, &r, "k", "N1"),
				record(t, s, &r, "k", "H1", seqsched.High),
				record(t, s, &r, "k", "H2", seqsched.High),
			}
			release()
			awaitAll(t, append(fs, h0)...)
			require.Equal(t, []string{"N1", "H1", "H2"}, r.get(), "the gate was High task 1 of the burst of 1")
		})
	}
}

// Random mixes of High and Normal tasks queued behind a first task that
// wakes the session, checked against the rule as WithHighBurst states it:
// after n High tasks in a row (the first task counts), one waiting Normal
// task goes next; the count resets when a Normal task runs or the session
// goes idle, and survives turn boundaries (another session competes for
// the one slot, and turns are 10 tasks long).
func TestHighBurstOrderFollowsTheRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 11))
	for _, limit := range []int{0, 1} {
		for burst := 1; burst <= 3; burst++ {
			opts := []seqsched.Option{seqsched.WithHighBurst(burst), seqsched.WithYieldAfter(10)}
			if limit > 0 {
				opts = append(opts, seqsched.WithMaxConcurrency(limit))
			}
			s := newScheduler[string](t, opts...)
			for batch := range 30 {
				prio := func() seqsched.Priority {
					if rng.IntN(3) > 0 {
						return seqsched.High
					}
					return seqsched.Normal
				}
				var r recorder
				firstPrio := prio()
				release, first := gate(t, s, "k", firstPrio)
				fs := []*seqsched.Future[struct{}]{first}
				var high, normal []string
				for i := range 5 + rng.IntN(30) {
					name := fmt.Sprint("N", i)
					p := prio()
					if p == seqsched.High {
						name = fmt.Sprint("H", i)
						high = append(high, name)
					} else {
						normal = append(normal, name)
					}
					fs = append(fs, record(t, s, &r, "k", name, p))
					if limit > 0 && i%4 == 0 { // a rival for the slot
						fs = append(fs, record(t, s, &recorder{}, "rival", "x"))
					}
				}
				// The rule, run on the queues as they stand at release.
				run := 0
				if firstPrio == seqsched.High {
					run = 1
				}
				var want []string
				for len(high)+len(normal) > 0 {
					if len(high) > 0 && (run < burst || len(normal) == 0) {
						want, high, run = append(want, high[0]), high[1:], run+1
					} else {
						want, normal, run = append(want, normal[0]), normal[1:], 0
					}
				}
				release()
				awaitAll(t, fs...)
				require.Equal(t, want, r.get(), "limit %d, burst %d, batch %d, first task %v", limit, burst, batch, firstPrio)
			}
		}
	}
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
		require.NoError(t, s.Shutdown(context.Background()))
	})
}

func TestWithoutWaitHistogramWaitsAreZero(t *testing.T) {
	s := newScheduler[string](t)
	awaitAll(t, record(t, s, new(recorder), "k", "x"))
	require.Equal(t, seqsched.WaitStats{}, s.Stats().Normal.Wait)
}

func TestPolicyOptionsRejectBadValues(t *testing.T) {
	for _, tc := range []struct {
		opt  seqsched.Option
		want string
	}{
		{seqsched.WithYieldInterval(-time.Second), "seqsched: WithYieldInterval(-1s): must be >= 0 (0 means off): invalid option"},
		{seqsched.WithHighBurst(-1), "seqsched: WithHighBurst(-1): must be >= 0 (0 means strict High-first): invalid option"},
		{seqsched.WithSlowTask(-time.Millisecond), "seqsched: WithSlowTask(-1ms): must be >= 0 (0 means off): invalid option"},
	} {
		_, err := seqsched.New[string](tc.opt)
		require.ErrorIs(t, err, seqsched.ErrInvalidOption)
		require.EqualError(t, err, tc.want)
	}
}
