// Priority: a queued High task runs before every queued Normal task of its
// session, but never interrupts the task that is running; WithHighBurst
// lets one Normal task through after n High ones.

package seqsched_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

func TestHighOvertakesQueuedNormal(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	release, g := gate(t, s, "k")
	fs := []*seqsched.Future[struct{}]{
		record(t, s, &r, "k", "n1"),
		record(t, s, &r, "k", "n2"),
		record(t, s, &r, "k", "h1", seqsched.High),
		record(t, s, &r, "k", "n3"),
		record(t, s, &r, "k", "h2", seqsched.High),
	}
	release()
	awaitAll(t, append(fs, g)...)
	require.Equal(t, []string{"h1", "h2", "n1", "n2", "n3"}, r.get())
}

func TestHighDoesNotInterruptRunningTask(t *testing.T) {
	s := newScheduler[string](t)
	var r recorder
	started, open := make(chan struct{}), make(chan struct{})
	running, err := s.Go(context.Background(), "k", func(context.Context) error {
		r.add("normal start")
		close(started)
		<-open
		r.add("normal end")
		return nil
	})
	require.NoError(t, err)
	<-started
	high := record(t, s, &r, "k", "high", seqsched.High)
	queued := record(t, s, &r, "k", "queued normal")
	close(open)
	awaitAll(t, running, high, queued)
	require.Equal(t, []string{"normal start", "normal end", "high", "queued normal"}, r.get())
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

// A High task submitted while a backlog's t2 runs goes ahead of t3..t20,
// and one submitted while its t12 runs, in the worker's second turn, goes
// ahead of t13..t20: they are queued until their session's goroutine runs
// them, however many the worker has taken off the lane.
func TestHighGoesAheadOfEveryNormalTaskNotYetStarted(t *testing.T) {
	for _, at := range backlogGates {
		t.Run(fmt.Sprint("t", at), func(t *testing.T) {
			s := newScheduler[string](t)
			b := queueBacklogAt(t, s, "k", at, nil, nil)
			high := record(t, s, &b.r, "k", "high", seqsched.High)
			b.release()
			awaitAll(t, append(b.fs, high)...)
			want := append(append(names(1, at), "high"), names(at+1, backlogLen)...)
			require.Equal(t, want, b.r.get(), "High goes next after the running task")
		})
	}
}
