// Fairness: busy sessions take turns. A turn ends after WithYieldAfter
// tasks (times WithWeight) or WithYieldInterval; under WithMaxConcurrency
// no more than n sessions run, and waiting sessions take the slots in
// the order they became ready; without a limit a busy session calls
// runtime.Gosched between turns.

package seqsched_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestSessionsYieldRoundRobinUnderMaxConcurrency(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(10))
	var r recorder
	release, g := gate(t, s, "gate") // holds the only slot
	var fs []*seqsched.Future[struct{}]
	for _, key := range []string{"A", "B"} {
		for range 30 {
			fs = append(fs, record(t, s, &r, key, key))
		}
	}
	release()
	awaitAll(t, append(fs, g)...)

	var want []string
	for range 3 {
		for _, key := range []string{"A", "B"} {
			for range 10 {
				want = append(want, key)
			}
		}
	}
	require.Equal(t, want, r.get())
	// A yields to B at 10 and 20, B to A at 10 and 20; at 30 each is empty.
	require.Equal(t, uint64(4), s.Stats().Yields)
}

func TestYieldAfterSetsTurnLength(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(25))
	var r recorder
	release, g := gate(t, s, "gate")
	var fs []*seqsched.Future[struct{}]
	for _, key := range []string{"A", "B", "C"} {
		for range 50 {
			fs = append(fs, record(t, s, &r, key, key))
		}
	}
	release()
	awaitAll(t, append(fs, g)...)
	var want []string
	for range 2 {
		for _, key := range []string{"A", "B", "C"} {
			for range 25 {
				want = append(want, key)
			}
		}
	}
	require.Equal(t, want, r.get())
}

func TestLoneSessionDrainsWithoutYielding(t *testing.T) {
	for _, opts := range [][]seqsched.Option{nil, {seqsched.WithMaxConcurrency(1)}} {
		t.Run(fmt.Sprint(opts), func(t *testing.T) {
			s := newScheduler[string](t, opts...)
			release, g := gate(t, s, "k")
			var fs []*seqsched.Future[struct{}]
			for range 200 {
				f, err := s.Go(context.Background(), "k", func(context.Context) error { return nil })
				require.NoError(t, err)
				fs = append(fs, f)
			}
			release()
			awaitAll(t, append(fs, g)...)
			require.Zero(t, s.Stats().Yields)
		})
	}
}

func TestWithoutLimitBusySessionCallsGosched(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithYieldAfter(10))
	other, og := gate(t, s, "other") // another session with work
	release, g := gate(t, s, "busy")
	var fs []*seqsched.Future[struct{}]
	for range 29 {
		f, err := s.Go(context.Background(), "busy", func(context.Context) error { return nil })
		require.NoError(t, err)
		fs = append(fs, f)
	}
	release()
	awaitAll(t, append(fs, g)...)
	// 30 tasks: a turn ends after the 10th and the 20th with work left.
	require.Equal(t, uint64(2), s.Stats().Yields)
	other()
	awaitAll(t, og)
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

func TestMaxConcurrencyBoundsRunningSessions(t *testing.T) {
	goleak.VerifyNone(t) // earlier tests' workers are gone: counts below are this test's
	synctest.Test(t, func(t *testing.T) {
		s, err := seqsched.New[int](seqsched.WithMaxConcurrency(3))
		require.NoError(t, err)
		var running, peak atomic.Int32
		open := make(chan struct{})
		var fs []*seqsched.Future[struct{}]
		for key := range 8 {
			for range 5 {
				f, err := s.Go(context.Background(), key, func(context.Context) error {
					n := running.Add(1)
					for {
						p := peak.Load()
						if n <= p || peak.CompareAndSwap(p, n) {
							break
						}
					}
					<-open
					running.Add(-1)
					return nil
				})
				require.NoError(t, err)
				fs = append(fs, f)
			}
		}
		synctest.Wait()
		st := s.Stats()
		require.Equal(t, 3, st.Running, "want exactly 3 sessions running")
		require.Equal(t, 8, st.Sessions)
		close(open)
		awaitAll(t, fs...)
		require.Equal(t, int32(3), peak.Load())
		require.NoError(t, s.Shutdown(context.Background()))
	})
}

func TestWaitingSessionsTakeSlotsInArrivalOrder(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	var r recorder
	release, g := gate(t, s, "gate")
	fs := []*seqsched.Future[struct{}]{
		record(t, s, &r, "C", "C"),
		record(t, s, &r, "A", "A"),
		record(t, s, &r, "B", "B"),
		record(t, s, &r, "A", "A2"),
	}
	release()
	awaitAll(t, append(fs, g)...)
	require.Equal(t, []string{"C", "A", "A2", "B"}, r.get())
}

// A successor released because Discard ended the session it was held back
// behind, while that session waited for a slot, takes its place in the
// ready queue: the key waited its turn already, and does not wait another
// behind sessions queued after it (FuzzModel input 29afd5d526af70d1).
func TestSuccessorReleasedByDiscardKeepsItsPlaceInTheReadyQueue(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1))
	var ran recorder
	gateA := make(chan struct{})
	aRunning := make(chan struct{})
	a, err := s.Go(context.Background(), "a", func(context.Context) error { close(aRunning); <-gateA; return nil })
	require.NoError(t, err)
	<-aRunning // a holds the only slot

	old, err := s.Open("b")
	require.NoError(t, err)
	dropped, err := seqsched.SubmitTo(context.Background(), old, func(context.Context) (int, error) {
		ran.add("b (old)")
		return 0, nil
	})
	require.NoError(t, err) // b waits for the slot: ready queue [b]
	var cs []*seqsched.Future[struct{}]
	for i := range 3 {
		cs = append(cs, record(t, s, &ran, "c", fmt.Sprintf("c%d", i))) // ready queue [b c]
	}
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(context.Background(), "b") }()
	for { // Remove has closed b once a task through its handle is refused
		f, err := old.Go(context.Background(), func(context.Context) error { return nil })
		if errors.Is(err, seqsched.ErrSessionClosing) {
			break
		}
		require.NoError(t, err)
		_ = f // a future, not a post: Discard leaves old b nothing to report
		runtime.Gosched()
	}
	succ, err := s.Open("b") // a successor, held back behind the closing b
	require.NoError(t, err)
	b2, err := seqsched.SubmitTo(context.Background(), succ, func(context.Context) (int, error) {
		ran.add("b (successor)")
		return 0, nil
	})
	require.NoError(t, err)
	require.NoError(t, old.Discard(context.Background())) // old b retires from the ready queue; the successor is released
	close(gateA)
	awaitAll(t, a)
	awaitAll(t, cs...)
	_, err = b2.Await(context.Background())
	require.NoError(t, err)
	_, err = dropped.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrDiscarded)
	require.NoError(t, <-removed)
	require.NoError(t, succ.Close(context.Background()))
	got := ran.get()
	require.Equal(t, []string{"b (successor)", "c0", "c1", "c2"}, got, "b's successor runs where b waited, before c")
}

// A successor that Open made while its key's session closed goes on where
// that session left off when it retires, with its slot and what is left of
// its turn: it does not go to the back of the ready queue (found by the
// model test, regression seed 4363303553723065933).
func TestSuccessorGoesOnWithItsPredecessorsSlotAndTurn(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(10))
	var ran recorder
	release, g := gate(t, s, "y")
	var fs []*seqsched.Future[struct{}]
	for i := 1; i < 30; i++ {
		fs = append(fs, record(t, s, &ran, "y", fmt.Sprint("y", i)))
	}
	fs = append(fs, record(t, s, &ran, "x", "X0")) // x waits for the slot behind y
	removed := make(chan error, 1)
	go func() { removed <- s.Remove(context.Background(), "x") }()
	for { // x closes: a task by key is refused
		if _, err := s.Go(context.Background(), "x", func(context.Context) error { return nil }); err != nil {
			require.ErrorIs(t, err, seqsched.ErrSessionClosing)
			break
		}
		runtime.Gosched()
	}
	h, err := s.Open("x") // a successor, held behind the closing x
	require.NoError(t, err)
	x1, err := h.Go(context.Background(), func(context.Context) error { ran.add("X1"); return nil })
	require.NoError(t, err)
	release()
	awaitAll(t, append(fs, g, x1)...)
	require.NoError(t, <-removed)
	require.NoError(t, h.Close(context.Background()))
	order := ran.get()
	x1At := slices.Index(order, "X1")
	require.Positive(t, x1At)
	require.Equal(t, "X0", order[x1At-1], "X1 runs right after X0, in x's turn: order %v", order)
	require.LessOrEqual(t, x1At, 11, "y ran at most one turn (10 tasks) before x's: order %v", order)
}
