package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
)

// The Savina workloads with many actors talking to each other: a hot
// broker (chameneos), all to all (big) and request/reply between actors
// (banking).

// Chameneos: chams chameneos (actors 1..chams) ask the mall (actor 0) for
// a partner until meetings meetings took place. The mall pairs each
// arrival with the one waiting; the waiting one takes the complement of
// the two colours and tells its partner, and both ask the mall again. Once
// the meetings are done, the mall sends every arrival home, and each
// reports how many meetings it had.
func Chameneos(mk func(int) Actors, chams, meetings int) error {
	const mall = 0
	a := mk(chams + 1)
	defer a.Close()
	left, waiting, home, total := meetings, -1, 0, 0 // the mall's
	colours := make([]int, chams+1)                  // each chameneo's own
	met := make([]int, chams+1)
	done := make(chan struct{})
	var meet func(from, colour int) Task
	var partner func(at, other, colour int) Task
	var change func(at, colour int) Task
	var exit func(at int) Task
	report := func(n int) Task {
		return func(context.Context) error {
			total += n
			if home++; home == chams {
				close(done)
			}
			return nil
		}
	}
	meet = func(from, colour int) Task { // runs on the mall
		return func(context.Context) error {
			switch {
			case left == 0:
				a.Send(from, exit(from))
			case waiting < 0:
				waiting = from
			default:
				left--
				a.Send(waiting, partner(waiting, from, colour))
				waiting = -1
			}
			return nil
		}
	}
	partner = func(at, other, colour int) Task {
		return func(context.Context) error {
			colours[at] = complement(colours[at], colour)
			met[at]++
			a.Send(other, change(other, colours[at]))
			a.Send(mall, meet(at, colours[at]))
			return nil
		}
	}
	change = func(at, colour int) Task {
		return func(context.Context) error {
			colours[at] = colour
			met[at]++
			a.Send(mall, meet(at, colour))
			return nil
		}
	}
	exit = func(at int) Task {
		return func(context.Context) error { a.Send(mall, report(met[at])); return nil }
	}
	for i := 1; i <= chams; i++ {
		a.Send(i, func(context.Context) error {
			colours[i] = i % 3
			a.Send(mall, meet(i, colours[i]))
			return nil
		})
	}
	if err := wait(done); err != nil {
		return err
	}
	if total != 2*meetings || left != 0 {
		return fmt.Errorf("chameneos: %d meetings counted by the chameneos, %d left; want %d and 0", total, left, 2*meetings)
	}
	return nil
}

// complement is the colour two chameneos of colours x and y take: theirs
// if they are alike, the third otherwise.
func complement(x, y int) int {
	if x == y {
		return x
	}
	return 3 - x - y
}

// Big: actors actors each send n pings, one at a time, each to an actor
// picked at random (itself included), which answers with a pong.
func Big(mk func(int) Actors, actors, n int) error {
	a := mk(actors)
	defer a.Close()
	sent := make([]int, actors) // each actor's own
	got := make([]int, actors)
	rngs := make([]*rand.Rand, actors)
	pong := make([]Task, actors)
	var wg sync.WaitGroup
	wg.Add(actors)
	ping := func(at, from int) Task {
		return func(context.Context) error {
			got[at]++
			a.Send(from, pong[from])
			return nil
		}
	}
	for i := range actors {
		rngs[i] = rand.New(rand.NewPCG(uint64(i), 42))
		pong[i] = func(context.Context) error { // also the start
			if sent[i] == n {
				wg.Done()
				return nil
			}
			sent[i]++
			to := rngs[i].IntN(actors)
			a.Send(to, ping(to, i))
			return nil
		}
	}
	for i := range actors {
		a.Send(i, pong[i])
	}
	if err := wait(waitDone(&wg)); err != nil {
		return err
	}
	total := 0
	for i := range actors {
		total += got[i]
		if sent[i] != n {
			return fmt.Errorf("big: actor %d sent %d pings; want %d", i, sent[i], n)
		}
	}
	if total != actors*n {
		return fmt.Errorf("big: %d pings answered; want %d", total, actors*n)
	}
	return nil
}

// Transfer is one banking transaction: amount from account Src to Dst.
type Transfer struct {
	Src, Dst int
	Amount   int64
}

// Transfers returns Savina's banking transactions for accounts accounts:
// the source among the first 80%, the destination above it (so that
// requests between accounts never wait in a cycle), amounts below 1,000.
func Transfers(accounts, n int) []Transfer {
	r := rand.New(rand.NewPCG(123456, 0))
	ts := make([]Transfer, n)
	for i := range ts {
		src := r.IntN(accounts / 10 * 8)
		step := max(1, r.IntN(accounts-src))
		ts[i] = Transfer{Src: src, Dst: src + step, Amount: r.Int64N(1000)}
	}
	return ts
}

// bankingOpening is every account's opening balance.
const bankingOpening = 1 << 40

// Banking: a teller (actor accounts) has the transfers made: each goes to
// its source account, which debits itself, asks the destination to credit
// itself and waits for the answer (request/reply between accounts), then
// tells the teller. Every balance is checked against the transfers applied
// one by one.
func Banking(mk func(int) Actors, accounts int, ts []Transfer) error {
	teller := accounts
	a := mk(accounts + 1)
	defer a.Close()
	balances := make([]int64, accounts) // each account's own
	for i := range balances {
		balances[i] = bankingOpening
	}
	replies := 0 // the teller's
	done := make(chan struct{})
	reply := func(context.Context) error {
		if replies++; replies == len(ts) {
			close(done)
		}
		return nil
	}
	for _, t := range ts {
		a.Send(t.Src, func(ctx context.Context) error {
			balances[t.Src] -= t.Amount
			a.Ask(ctx, t.Dst, func(context.Context) error { balances[t.Dst] += t.Amount; return nil })
			a.Send(teller, reply)
			return nil
		})
	}
	if err := wait(done); err != nil {
		return err
	}
	want := make([]int64, accounts)
	for i := range want {
		want[i] = bankingOpening
	}
	for _, t := range ts {
		want[t.Src] -= t.Amount
		want[t.Dst] += t.Amount
	}
	for i := range want {
		if balances[i] != want[i] {
			return fmt.Errorf("banking: account %d holds %d; want %d", i, balances[i], want[i])
		}
	}
	return nil
}
