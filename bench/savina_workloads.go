package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Savina is one workload of the Savina subset (Imam and Sarkar, AGERE
// 2014; shamsimam/savina) at one size. Its protocol follows the suite's;
// the code is this package's. Run makes a fresh system with mk, runs the
// workload to its end, checks the result (counts, balances) and closes the
// system: one Savina iteration. It returns an error when the result is
// wrong.
type Savina struct {
	Name string
	Size string // the parameters, as Savina names them
	Msgs int    // messages delivered in one run
	Run  func(mk func(n int) Actors) error
}

// SavinaSuite returns the subset at Savina's default sizes, which all run
// in well under a minute on 2 cores, or at a hundredth of them (about)
// when short: what CI runs, every check included.
func SavinaSuite(short bool) []Savina {
	div := 1
	if short {
		div = 100
	}
	pings := 40_000 / div
	count := 1_000_000 / div
	thrActors, thrMsgs := 60, 10_000/div
	creates := 40_000 / div
	ring, passes := 100, 100_000/div
	chams, meetings := 100, 200_000/div
	bigActors, bigPings := 120, 20_000/div
	accounts, transfers := 1_000, 50_000/div
	ts := Transfers(accounts, transfers)
	return []Savina{
		{"pingpong", fmt.Sprintf("N=%d", pings), 2 * pings,
			func(mk func(int) Actors) error { return PingPong(mk, pings) }},
		{"count", fmt.Sprintf("N=%d", count), count + 1,
			func(mk func(int) Actors) error { return Count(mk, count) }},
		{"fjthrput", fmt.Sprintf("A=%d N=%d", thrActors, thrMsgs), thrActors * thrMsgs,
			func(mk func(int) Actors) error { return FJThroughput(mk, thrActors, thrMsgs) }},
		{"fjcreate", fmt.Sprintf("N=%d", creates), creates,
			func(mk func(int) Actors) error { return FJCreate(mk, creates) }},
		{"threadring", fmt.Sprintf("N=%d R=%d", ring, passes), passes + 1,
			func(mk func(int) Actors) error { return ThreadRing(mk, ring, passes) }},
		{"chameneos", fmt.Sprintf("C=%d M=%d", chams, meetings), 4*meetings + 3*chams,
			func(mk func(int) Actors) error { return Chameneos(mk, chams, meetings) }},
		{"big", fmt.Sprintf("W=%d N=%d", bigActors, bigPings), 2 * bigActors * bigPings,
			func(mk func(int) Actors) error { return Big(mk, bigActors, bigPings) }},
		{"banking", fmt.Sprintf("A=%d N=%d", accounts, transfers), 3 * transfers,
			func(mk func(int) Actors) error { return Banking(mk, accounts, ts) }},
	}
}

// savinaTimeout bounds every wait for a workload's end, so that a lost
// message fails the run instead of hanging it.
const savinaTimeout = 5 * time.Minute

var errTimeout = errors.New("bench: savina: timed out waiting for the end")

func wait(done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-time.After(savinaTimeout):
		return errTimeout
	}
}

// compute is Savina's performComputation: a sine squared, which is never
// negative; the result goes into state the check reads, so that the
// compiler keeps it.
func compute(theta float64) float64 {
	s := math.Sin(theta)
	return s * s
}

// PingPong: actor 0 sends n pings to actor 1, each after the pong of the
// one before; one message in flight, a wake-up per message.
func PingPong(mk func(int) Actors, n int) error {
	a := mk(2)
	defer a.Close()
	var pings, pongs int // each written by its actor only
	done := make(chan struct{})
	var ping, pong Task
	ping = func(context.Context) error {
		if pings == n {
			close(done)
			return nil
		}
		pings++
		a.Send(1, pong)
		return nil
	}
	pong = func(context.Context) error {
		pongs++
		a.Send(0, ping)
		return nil
	}
	a.Send(0, ping)
	if err := wait(done); err != nil {
		return err
	}
	if pings != n || pongs != n {
		return fmt.Errorf("pingpong: %d pings and %d pongs; want %d each", pings, pongs, n)
	}
	return nil
}

// Count: n increments to actor 0 from one producer, then a request for
// the total.
func Count(mk func(int) Actors, n int) error {
	a := mk(1)
	defer a.Close()
	var count, got int
	inc := func(context.Context) error { count++; return nil }
	for range n {
		a.Send(0, inc)
	}
	a.Ask(bg, 0, func(context.Context) error { got = count; return nil })
	if got != n {
		return fmt.Errorf("count: the counter saw %d; want %d", got, n)
	}
	return nil
}

// FJThroughput: n messages to each of actors actors, sent round robin by
// one producer; each message is a computation.
func FJThroughput(mk func(int) Actors, actors, n int) error {
	a := mk(actors)
	counts := make([]int, actors)
	sums := make([]float64, actors)
	var wg sync.WaitGroup
	wg.Add(actors)
	work := make([]Task, actors)
	for k := range work {
		work[k] = func(context.Context) error {
			sums[k] += compute(float64(counts[k]))
			if counts[k]++; counts[k] == n {
				wg.Done()
			}
			return nil
		}
	}
	for range n {
		for k := range actors {
			a.Send(k, work[k])
		}
	}
	err := wait(waitDone(&wg))
	a.Close() // runs whatever is still queued: a message too many shows
	if err != nil {
		return err
	}
	for k, c := range counts {
		if c != n || sums[k] < 0 {
			return fmt.Errorf("fjthrput: actor %d ran %d messages; want %d", k, c, n)
		}
	}
	return nil
}

// FJCreate: n actors made, each sent one computation and torn down after
// it; the run ends when every teardown is done (Close).
func FJCreate(mk func(int) Actors, n int) error {
	a := mk(0)
	res := make([]float64, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		a.Once(i, func(context.Context) error {
			res[i] = 1 + compute(float64(i))
			wg.Done()
			return nil
		})
	}
	err := wait(waitDone(&wg))
	a.Close()
	if err != nil {
		return err
	}
	for i, r := range res {
		if r < 1 {
			return fmt.Errorf("fjcreate: actor %d did not run", i)
		}
	}
	return nil
}

// ThreadRing: a token with passes hops left goes round a ring of actors
// actors, each forwarding it with one hop less; one message in flight.
func ThreadRing(mk func(int) Actors, actors, passes int) error {
	a := mk(actors)
	defer a.Close()
	got := make([]int, actors)
	done := make(chan struct{})
	var pass func(at, hops int) Task
	pass = func(at, hops int) Task {
		return func(context.Context) error {
			got[at]++
			if hops == 0 {
				close(done)
				return nil
			}
			next := (at + 1) % actors
			a.Send(next, pass(next, hops-1))
			return nil
		}
	}
	a.Send(0, pass(0, passes))
	if err := wait(done); err != nil {
		return err
	}
	total := 0
	for k, g := range got { // passes+1 deliveries, from actor 0 on
		total += g
		if want := (passes + 1) / actors; g != want && g != want+1 {
			return fmt.Errorf("threadring: actor %d got the token %d times; want %d or %d", k, g, want, want+1)
		}
	}
	if total != passes+1 {
		return fmt.Errorf("threadring: %d deliveries; want %d", total, passes+1)
	}
	return nil
}

// waitDone returns a channel closed when wg's count is zero.
func waitDone(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}
