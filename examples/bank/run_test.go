package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/examples/bank/internal/ledger"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// small keeps the runs short under -race.
var small = []string{"-accounts", "60", "-traffic", "10", "-workers", "3", "-window", "5"}

func TestOrderedRunPrintsSummaryAndExitsZero(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	args := append([]string{"-db", filepath.Join(dir, "b.db"), "-journal", filepath.Join(dir, "j.log")}, small...)
	code := run(context.Background(), args, &out, &errOut)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	for _, want := range []string{
		"bank: 60 accounts x [withdraw 50, deposit 100, withdraw 150] from balance 100,",
		"ordered by seqsched",
		"operations: 360 in ",
		"failures:   0\n",
		"every balance is exactly 0: OK",
	} {
		assert.Contains(t, out.String(), want)
	}
	assert.Regexp(t, `latency:    p50 \S+, p99 \S+, max \S+`, out.String())
	// 180 script steps commit, plus the traffic transfers that did.
	m := regexp.MustCompile(`journal:    (\d+) lines`).FindStringSubmatch(out.String())
	require.NotNil(t, m)
	n, _ := strconv.Atoi(m[1])
	assert.GreaterOrEqual(t, n, 180)
}

// Without the scheduler, the three steps of an account race, so some
// usually run out of order. Whether they do in a given run is up to the Go
// scheduler, so this test checks the report, not the count: exit code 1
// exactly when failures are printed, one line each.
func TestUnorderedRunReportsWhatWentWrong(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"-unordered"}, small...), &out, &errOut)
	assert.Empty(t, errOut.String())
	assert.Contains(t, out.String(), "UNORDERED: plain goroutines")
	m := regexp.MustCompile(`failures:   (\d+)(, on \d+ accounts)?\n`).FindStringSubmatch(out.String())
	require.NotNil(t, m, out.String())
	n, _ := strconv.Atoi(m[1])
	if n == 0 {
		assert.Equal(t, 0, code)
		return
	}
	assert.Equal(t, 1, code)
	listed := strings.Count(out.String(), "\n  account ")
	assert.Equal(t, min(n, maxShown), listed, out.String())
}

// A bad flag ends the program with exit code 2 before anything runs. A
// value the flag package accepts but the run cannot use gets one line.
func TestBadFlagExitsTwo(t *testing.T) {
	cases := map[string]struct {
		args  []string
		want  string
		usage bool // the flag package's own error, followed by the usage
	}{
		"unknown flag":      {[]string{"-nope"}, "flag provided but not defined: -nope", true},
		"no accounts":       {[]string{"-accounts", "0"}, "bank: -accounts 0: must be 1..1000000", false},
		"too many accounts": {[]string{"-accounts", "3000000000"}, "bank: -accounts 3000000000: must be 1..1000000", false},
		"accounts overflow": {[]string{"-accounts", "9223372036854775807"}, "bank: -accounts 9223372036854775807: must be 1..1000000", false},
		"one traffic":       {[]string{"-traffic", "1"}, "bank: -traffic 1: must be 2..1000000 (a transfer needs two accounts)", false},
		"too much traffic":  {[]string{"-traffic", "3000000000"}, "bank: -traffic 3000000000: must be 2..1000000 (a transfer needs two accounts)", false},
		"no workers":        {[]string{"-workers", "0"}, "bank: -workers 0: must be 1..10000", false},
		"too many workers":  {[]string{"-workers", "3000000000"}, "bank: -workers 3000000000: must be 1..10000", false},
		"workers overflow":  {[]string{"-workers", "9223372036854775807"}, "bank: -workers 9223372036854775807: must be 1..10000", false},
		"negative window":   {[]string{"-window", "-1"}, "bank: -window -1: must be at least 1", false},
		"negative halts":    {[]string{"-halts", "-1"}, "bank: -halts -1: must be 0..1000000", false},
		"unknown operator":  {[]string{"-operator", "ignore"}, `bank: -operator "ignore": must be resume or discard`, false},
		"stray argument":    {[]string{"extra"}, `bank: unexpected argument "extra" (all options are flags)`, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			assert.Equal(t, 2, run(context.Background(), tc.args, &out, &errOut))
			assert.Empty(t, out.String(), "nothing ran")
			if tc.usage {
				assert.True(t, strings.HasPrefix(errOut.String(), tc.want+"\n"), errOut.String())
			} else {
				assert.Equal(t, tc.want+"\n", errOut.String(), "one line")
			}
		})
	}
}

// The halt phase, under each operator command. Each halt account's first
// withdrawal fails and halts it. While it is halted nothing of it runs:
// neither its held deposit and withdrawal nor a Balance the test submits
// then. Then the operator resumes it after a credit (which, High, runs
// first; the test's Balance runs last and sees the final state) or
// discards what it holds (the test's Balance included). The database and
// the journal show exactly what ran, in which order.
func TestHaltedAccountRunsNothingUntilTheOperatorActs(t *testing.T) {
	cases := []struct {
		operator string
		summary  string   // the program's last lines
		rows     []string // account 71's row and ledger rows
		journal  []string // account 71's journal lines, in the order written
		balance  int64    // what the Balance submitted while halted sees, if it runs
	}{{
		operator: "resume",
		summary: "operator:   resume each, after a credit of 10: credit, deposit 100, withdraw 150 ran in that order\n" +
			"nothing ran while halted, and every halted account ends at exactly 0: OK\n",
		rows: []string{"account 71 balance=0 version=3",
			"ledger 71/1 credit 10 -> 50", "ledger 71/2 deposit 100 -> 150", "ledger 71/3 withdraw -150 -> 0"},
		// The journal follows an account's operations in the order they
		// were submitted; each line's version is the order they ran in.
		journal: []string{"account=71 op=deposit amount=100 balance=150 version=2",
			"account=71 op=withdraw amount=150 balance=0 version=3",
			"account=71 op=credit amount=10 balance=50 version=1"},
	}, {
		operator: "discard",
		summary: "operator:   discard each: its held operations dropped unrun\n" +
			"nothing ran while halted, and every halted account ends at exactly 40: OK\n",
		rows: []string{"account 71 balance=40 version=0"},
	}}
	for _, tc := range cases {
		t.Run(tc.operator, func(t *testing.T) {
			dir := t.TempDir()
			dbPath, journalPath := filepath.Join(dir, "b.db"), filepath.Join(dir, "j.log")
			args := append([]string{"-db", dbPath, "-journal", journalPath, "-halts", "3", "-operator", tc.operator}, small...)
			ids := []ledger.AccountID{71, 72, 73} // after 60 replay and 10 traffic accounts
			reads := map[ledger.AccountID]ledger.Pending{}
			called := 0
			hk := hooks{halted: func(b *ledger.Bank, halted []ledger.AccountID) {
				called++
				require.Equal(t, ids, halted)
				for _, id := range ids {
					assert.True(t, b.Halted(id), "account %d", id)
					r, err := b.Review(context.Background(), id)
					require.NoError(t, err)
					assert.Equal(t, ledger.Receipt{Op: ledger.OpReview, Account: id, Balance: 40}, r,
						"account %d: nothing ran since its failed withdrawal", id)
					p, err := b.Balance(context.Background(), id) // accepted, held
					require.NoError(t, err)
					assert.False(t, resolved(p), "account %d: a Balance ran while halted", id)
					reads[id] = p
				}
			}}
			var out, errOut bytes.Buffer
			code := runHooked(context.Background(), args, &out, &errOut, hk)
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
			require.Equal(t, 1, called, "the halted hook")
			assert.Empty(t, errOut.String())
			assert.True(t, strings.HasSuffix(out.String(), "every balance is exactly 0: OK\n"+
				"halts:      3 accounts x [withdraw 50, deposit 100, withdraw 150] from balance 40, HaltOnError\n"+
				"            withdraw 50 failed on each and halted it: 6 later operations held\n"+tc.summary), out.String())

			// The Balance submitted while halted ran after everything the
			// operator let run, or was discarded with the held operations.
			for _, id := range ids {
				r, err := reads[id].Await(context.Background()) // resolved: the bank is closed
				if tc.operator == "discard" {
					assert.ErrorIs(t, err, seqsched.ErrDiscarded, "account %d", id)
					continue
				}
				require.NoError(t, err)
				assert.Equal(t, ledger.Receipt{Op: ledger.OpBalance, Account: id, Version: 3}, r, "account %d", id)
			}

			// Exactly what ran on account 71, in order, as the database and
			// the journal have it; 72 and 73 alike.
			for _, id := range ids {
				want := make([]string, len(tc.rows))
				for i, row := range tc.rows {
					want[i] = strings.ReplaceAll(row, " 71", fmt.Sprintf(" %d", id))
				}
				assert.Equal(t, want, rowsOf(t, dbPath, id))
				var wantJournal []string
				for _, line := range tc.journal {
					wantJournal = append(wantJournal, strings.Replace(line, "=71 ", fmt.Sprintf("=%d ", id), 1))
				}
				assert.Equal(t, wantJournal, journalOf(t, journalPath, id))
			}
		})
	}
}

// rowsOf returns account id's row and its ledger rows, in version order.
func rowsOf(t *testing.T, dbPath string, id ledger.AccountID) []string {
	t.Helper()
	db, err := ledger.OpenDB(context.Background(), dbPath)
	require.NoError(t, err)
	defer db.Close()
	var balance, version int64
	require.NoError(t, db.QueryRow(`SELECT balance, version FROM accounts WHERE id = $1`, int64(id)).Scan(&balance, &version))
	out := []string{fmt.Sprintf("account %d balance=%d version=%d", id, balance, version)}
	rows, err := db.Query(`SELECT version, op, amount, balance FROM ledger WHERE account = $1 ORDER BY version`, int64(id))
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var v, amount, after int64
		var op string
		require.NoError(t, rows.Scan(&v, &op, &amount, &after))
		out = append(out, fmt.Sprintf("ledger %d/%d %s %d -> %d", id, v, op, amount, after))
	}
	require.NoError(t, rows.Err())
	return out
}

// journalOf returns account id's journal lines, in the order written.
func journalOf(t *testing.T, path string, id ledger.AccountID) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []string
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, fmt.Sprintf("account=%d ", id)) {
			out = append(out, strings.TrimSuffix(line, "\n"))
		}
	}
	return out
}
