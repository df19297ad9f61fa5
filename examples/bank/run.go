package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/seqsched/seqsched/examples/bank/internal/ledger"
	"github.com/seqsched/seqsched/examples/bank/internal/replay"
)

// maxShown bounds how many failures are printed one by one.
const maxShown = 10

// Limits on the size of a run, so that a mistyped flag gets an error
// instead of a crash or a run that never ends.
const (
	// maxAccounts bounds -accounts and -traffic each: every account is a
	// row created before the run and an ID held in memory, and at the
	// 10,000 operations a second SQLite manages, a million replay accounts
	// already take ten minutes.
	maxAccounts = 1_000_000
	// maxWorkers bounds -workers: each is a goroutine, and those beyond
	// the accounts only idle.
	maxWorkers = 10_000
)

// run is the whole program; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runHooked(ctx, args, stdout, stderr, hooks{})
}

// runHooked is run with hooks.
func runHooked(ctx context.Context, args []string, stdout, stderr io.Writer, hk hooks) int {
	fs := flag.NewFlagSet("bank", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("db", "", "SQLite file path, or a postgres:// URL (default: a file in a fresh temp dir)")
	journalPath := fs.String("journal", "", "journal file (default: next to the SQLite file, or in a temp dir)")
	unordered := fs.Bool("unordered", false, "run operations on plain goroutines instead of seqsched sessions")
	cfg := replay.Config{Seed: uint64(time.Now().UnixNano())}
	fs.IntVar(&cfg.Accounts, "accounts", 1000, "accounts that replay the script")
	fs.IntVar(&cfg.Traffic, "traffic", 100, "other accounts, whose transfers, reads and audits are interleaved")
	fs.IntVar(&cfg.Workers, "workers", 8, "goroutines submitting operations")
	fs.IntVar(&cfg.Window, "window", 10, "accounts each worker has in flight at once")
	nHalts := fs.Int("halts", 10, "accounts that get the script from too low a balance, halt, and wait for the operator (ordered runs only)")
	operator := fs.String("operator", opResume, "what the operator does with a halted account: resume (after a credit) or discard")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bank: unexpected argument %q (all options are flags)\n", fs.Arg(0))
		return 2
	}
	if err := checkFlags(cfg, *nHalts, *operator); err != nil {
		fmt.Fprintln(stderr, "bank:", err)
		return 2
	}
	if *unordered {
		*nHalts = 0 // no sessions to halt
	}
	if err := runE(ctx, *dsn, *journalPath, *unordered, cfg, *nHalts, *operator, stdout, hk); err != nil {
		var failed errFailures
		if errors.As(err, &failed) {
			return 1
		}
		fmt.Fprintln(stderr, "bank:", err)
		return 1
	}
	return 0
}

// checkFlags rejects flag values the run cannot use, before it touches a
// database.
func checkFlags(cfg replay.Config, halts int, operator string) error {
	switch {
	case halts < 0 || halts > maxAccounts:
		return fmt.Errorf("-halts %d: must be 0..%d", halts, maxAccounts)
	case operator != opResume && operator != opDiscard:
		return fmt.Errorf("-operator %q: must be %s or %s", operator, opResume, opDiscard)
	case cfg.Accounts < 1 || cfg.Accounts > maxAccounts:
		return fmt.Errorf("-accounts %d: must be 1..%d", cfg.Accounts, maxAccounts)
	case cfg.Traffic < 2 || cfg.Traffic > maxAccounts:
		return fmt.Errorf("-traffic %d: must be 2..%d (a transfer needs two accounts)", cfg.Traffic, maxAccounts)
	case cfg.Workers < 1 || cfg.Workers > maxWorkers:
		return fmt.Errorf("-workers %d: must be 1..%d", cfg.Workers, maxWorkers)
	case cfg.Window < 1:
		return fmt.Errorf("-window %d: must be at least 1", cfg.Window)
	}
	return nil
}

// errFailures reports that the run completed and found failures.
type errFailures int

func (e errFailures) Error() string { return fmt.Sprintf("%d failures", int(e)) }

func runE(ctx context.Context, dsn, journalPath string, unordered bool, cfg replay.Config,
	nHalts int, operator string, out io.Writer, hk hooks) error {
	if dsn == "" || journalPath == "" {
		dir, err := os.MkdirTemp("", "seqsched-bank-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if dsn == "" {
			dsn = filepath.Join(dir, "bank.db")
		}
		if journalPath == "" {
			journalPath = filepath.Join(dir, "journal.log")
		}
	}
	db, err := ledger.OpenDB(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	journal, err := os.Create(journalPath)
	if err != nil {
		return err
	}
	defer journal.Close()
	counted := &lineCounter{w: journal}
	halted := &halts{first: ledger.AccountID(cfg.Accounts + cfg.Traffic + 1), ch: make(chan ledger.AccountID, 2*nHalts)}
	bank, err := ledger.New(db, ledger.Config{Journal: counted, Unordered: unordered,
		HaltWithdrawals: nHalts > 0, OnHalt: halted.note})
	if err != nil {
		return err
	}
	halted.bank = bank

	mode := "ordered by seqsched: one session per account"
	if unordered {
		mode = "UNORDERED: plain goroutines, no seqsched"
	}
	fmt.Fprintf(out, "bank: %d accounts x [withdraw 50, deposit 100, withdraw 150] from balance 100,\n", cfg.Accounts)
	fmt.Fprintf(out, "      %d other accounts' transfers, reads and audits interleaved (%s)\n", cfg.Traffic, mode)
	res, err := replay.Run(ctx, bank, cfg)
	var hres haltResult
	if err == nil && nHalts > 0 {
		ids := make([]ledger.AccountID, nHalts)
		for i := range ids {
			ids[i] = halted.first + ledger.AccountID(i)
		}
		hres, err = haltPhase(ctx, bank, halted, ids, operator, hk)
	}
	if cerr := bank.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	report(out, res, counted.lines)
	if nHalts > 0 {
		reportHalts(out, hres)
	}
	if n := len(res.Failures) + len(hres.failures); n > 0 {
		return errFailures(n)
	}
	return nil
}

// report prints the summary and the failures.
func report(out io.Writer, res replay.Result, journaled int) {
	st := res.Stats
	fmt.Fprintf(out, "operations: %d in %v (%.0f ops/s)\n", res.Ops, res.Elapsed.Round(time.Millisecond),
		float64(res.Ops)/res.Elapsed.Seconds())
	fmt.Fprintf(out, "latency:    p50 %v, p99 %v, max %v (submit to commit)\n",
		st.P50.Round(time.Microsecond), st.P99.Round(time.Microsecond), st.Max.Round(time.Microsecond))
	fmt.Fprintf(out, "journal:    %d lines\n", journaled)
	if len(res.Failures) == 0 {
		fmt.Fprintln(out, "failures:   0")
	} else {
		fmt.Fprintf(out, "failures:   %d, on %d accounts\n", len(res.Failures), res.Accounts())
	}
	for i, f := range res.Failures {
		if i == maxShown {
			fmt.Fprintf(out, "  ... and %d more\n", len(res.Failures)-maxShown)
			break
		}
		fmt.Fprintf(out, "  %v\n", f)
	}
	if len(res.Failures) == 0 {
		fmt.Fprintln(out, "every balance is exactly 0: OK")
	}
}

// lineCounter counts the journal's lines as they are written. The journal
// writes one line per call, under its own lock.
type lineCounter struct {
	w     io.Writer
	lines int
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.lines++
	return c.w.Write(p)
}
