// Package replay drives a ledger.Bank with the classic ordering test: every
// account starts at 100 and receives "withdraw 50, deposit 100, withdraw
// 150", submitted back to back without waiting, while other accounts'
// traffic is interleaved. In order, every step succeeds and every balance
// ends at exactly 0; in any other order some step overdraws, or a balance
// ends elsewhere.
package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/seqsched/seqsched/examples/bank/internal/ledger"
)

// Opening balances.
const (
	ReplayOpening  = 100
	TrafficOpening = 1000
)

// step is one operation of the script.
type step struct {
	op     ledger.Op
	amount int64
}

// script is what every replay account receives, in this order.
var script = []step{{ledger.OpWithdraw, 50}, {ledger.OpDeposit, 100}, {ledger.OpWithdraw, 150}}

// Config sizes a run.
type Config struct {
	Accounts int    // accounts that replay the script; 1..Accounts
	Traffic  int    // other accounts, whose operations are interleaved
	Workers  int    // goroutines submitting at once
	Window   int    // accounts a worker has in flight at once
	Seed     uint64 // for the interleaving
}

// Failure is one thing that went wrong.
type Failure struct {
	Account ledger.AccountID
	What    string
}

func (f Failure) String() string { return fmt.Sprintf("account %d: %s", f.Account, f.What) }

// Result is what a run did and found.
type Result struct {
	Ops      int // operations submitted
	Elapsed  time.Duration
	Stats    ledger.Stats
	Failures []Failure // by account
}

// Accounts returns how many distinct accounts failed.
func (r Result) Accounts() int {
	n := 0
	for i, f := range r.Failures {
		if i == 0 || f.Account != r.Failures[i-1].Account {
			n++
		}
	}
	return n
}

// Run creates the accounts, replays the script on every replay account with
// traffic interleaved, waits for everything, and checks every balance. It
// returns an error only if the run could not be carried out; wrong balances
// and failed steps are Failures.
func Run(ctx context.Context, b *ledger.Bank, cfg Config) (Result, error) {
	if cfg.Accounts < 1 || cfg.Traffic < 2 || cfg.Workers < 1 || cfg.Window < 1 {
		return Result{}, fmt.Errorf("replay: need Accounts >= 1, Traffic >= 2, Workers >= 1, Window >= 1; got %+v", cfg)
	}
	replayIDs := ids(1, cfg.Accounts)
	trafficIDs := ids(cfg.Accounts+1, cfg.Traffic)
	if err := b.CreateAccounts(ctx, ReplayOpening, replayIDs...); err != nil {
		return Result{}, fmt.Errorf("replay: set up accounts (the database must be empty): %w", err)
	}
	if err := b.CreateAccounts(ctx, TrafficOpening, trafficIDs...); err != nil {
		return Result{}, fmt.Errorf("replay: set up accounts (the database must be empty): %w", err)
	}

	var (
		mu       sync.Mutex
		failures []Failure
		ops      int
	)
	fail := func(f Failure) {
		mu.Lock()
		failures = append(failures, f)
		mu.Unlock()
	}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for n := range cfg.Workers {
		var mine []ledger.AccountID
		for i := n; i < len(replayIDs); i += cfg.Workers {
			mine = append(mine, replayIDs[i])
		}
		w := &worker{b: b, traffic: trafficIDs, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(n))), fail: fail}
		g.Go(func() error {
			for len(mine) > 0 {
				batch := mine[:min(cfg.Window, len(mine))]
				mine = mine[len(batch):]
				n, err := w.replay(gctx, batch)
				if err != nil {
					return err
				}
				mu.Lock()
				ops += n
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Result{}, err
	}
	res := Result{Ops: ops, Elapsed: time.Since(start), Stats: b.Stats()}

	// Every operation has completed: check where the balances ended.
	for _, id := range replayIDs {
		r, err := balance(ctx, b, id)
		if err != nil {
			return Result{}, err
		}
		if r.Balance != 0 {
			fail(Failure{id, fmt.Sprintf("final balance %d, want 0", r.Balance)})
		}
	}
	var total int64
	for _, id := range trafficIDs {
		r, err := balance(ctx, b, id)
		if err != nil {
			return Result{}, err
		}
		total += r.Balance
	}
	if want := int64(TrafficOpening * len(trafficIDs)); total != want {
		fail(Failure{trafficIDs[0], fmt.Sprintf("traffic accounts hold %d in total, want %d", total, want)})
	}
	slices.SortStableFunc(failures, func(a, b Failure) int { return cmp.Compare(a.Account, b.Account) })
	res.Failures = failures
	return res, nil
}

// worker submits the script for its accounts, a window at a time,
// interleaved with traffic.
type worker struct {
	b       *ledger.Bank
	traffic []ledger.AccountID
	rng     *rand.Rand
	fail    func(Failure)
}

// replay submits step k of every account before step k+1 of any, shuffling
// the accounts each time and putting a traffic operation after each step,
// without waiting for anything. Then it awaits everything. It returns the
// number of operations submitted.
func (w *worker) replay(ctx context.Context, mine []ledger.AccountID) (int, error) {
	pending := make(map[ledger.AccountID][]ledger.Pending, len(mine))
	var traffic []ledger.Pending
	for _, st := range script {
		w.rng.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
		for _, id := range mine {
			var p ledger.Pending
			var err error
			if st.op == ledger.OpDeposit {
				p, err = w.b.Deposit(ctx, id, st.amount)
			} else {
				p, err = w.b.Withdraw(ctx, id, st.amount)
			}
			if err != nil {
				return 0, err
			}
			pending[id] = append(pending[id], p)
			if p, err = w.other(ctx); err != nil {
				return 0, err
			}
			traffic = append(traffic, p)
		}
	}
	for id, ps := range pending {
		for i, p := range ps {
			if _, err := p.Await(ctx); err != nil {
				w.fail(Failure{id, fmt.Sprintf("step %d: %v", i+1, err)})
			}
		}
	}
	for _, p := range traffic {
		_, err := p.Await(ctx)
		if err != nil && !errors.Is(err, ledger.ErrInsufficientFunds) {
			return 0, fmt.Errorf("replay: traffic: %w", err)
		}
	}
	return 2 * len(mine) * len(script), nil
}

// other submits one operation on the traffic accounts: mostly transfers,
// some balance reads and High-priority audits.
func (w *worker) other(ctx context.Context) (ledger.Pending, error) {
	a := w.traffic[w.rng.IntN(len(w.traffic))]
	switch n := w.rng.IntN(10); {
	case n < 6:
		b := w.traffic[w.rng.IntN(len(w.traffic)-1)]
		if b >= a {
			b++ // any account but a
		}
		return w.b.Transfer(ctx, a, b, 1+w.rng.Int64N(20))
	case n < 8:
		return w.b.Balance(ctx, a)
	default:
		return w.b.Audit(ctx, a)
	}
}

// balance reads id's balance after everything submitted before.
func balance(ctx context.Context, b *ledger.Bank, id ledger.AccountID) (ledger.Receipt, error) {
	p, err := b.Balance(ctx, id)
	if err != nil {
		return ledger.Receipt{}, err
	}
	return p.Await(ctx)
}

// ids returns n consecutive account IDs from first.
func ids(first, n int) []ledger.AccountID {
	out := make([]ledger.AccountID, n)
	for i := range out {
		out[i] = ledger.AccountID(first + i)
	}
	return out
}
