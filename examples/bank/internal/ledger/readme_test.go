package ledger_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/examples/bank/internal/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The bank's README shows "the pattern to copy, for a request handler".
// openBank and handleDeposit are that pattern, compiled and run:
// TestReadmeHandlerPatternIsThisFilesCode checks that every line of the
// README's snippet is a line of this file, in the same order, so the
// snippet cannot drift from code that builds.

type depositRequest struct{ ID string }

func openBank(db *sql.DB) (*ledger.Bank, error) {
	bank, err := ledger.New(db, ledger.Config{MaxQueue: 1000}) // WithMaxQueue: refuse, don't pile up
	return bank, err
}

func handleDeposit(ctx context.Context, bank *ledger.Bank, account ledger.AccountID, amount int64, req depositRequest) (int, ledger.Receipt) {
	p, err := bank.Deposit(ctx, account, amount, ledger.RequestID(req.ID)) // req.ID: unique, made by the client
	switch {
	case errors.Is(err, seqsched.ErrQueueFull):
		return http.StatusServiceUnavailable, ledger.Receipt{} // busy: the client retries later, with the same ID
	case err != nil:
		return http.StatusBadRequest, ledger.Receipt{} // amount <= 0, a bad ID, or the bank is closed
	}
	receipt, err := p.Await(ctx) // ErrInsufficientFunds, ErrOverflow, ErrRequestReused, ...
	if err != nil {
		return http.StatusConflict, ledger.Receipt{}
	}
	return http.StatusOK, receipt
}

func TestReadmeHandlerPatternRuns(t *testing.T) {
	ctx := context.Background()
	db, err := ledger.OpenDB(ctx, filepath.Join(t.TempDir(), "bank.db"))
	require.NoError(t, err)
	defer db.Close()
	bank, err := openBank(db)
	require.NoError(t, err)
	defer func() { require.NoError(t, bank.Close(ctx)) }()
	require.NoError(t, bank.CreateAccounts(ctx, 100, 1))

	status, first := handleDeposit(ctx, bank, 1, 50, depositRequest{ID: "req-1"})
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, int64(150), first.Balance)
	status, retry := handleDeposit(ctx, bank, 1, 50, depositRequest{ID: "req-1"})
	assert.Equal(t, http.StatusOK, status)
	assert.True(t, retry.Replayed, "the retry with the same ID gets the first receipt")
	assert.Equal(t, int64(150), retry.Balance, "and deposits nothing")
	status, _ = handleDeposit(ctx, bank, 1, 0, depositRequest{ID: "req-2"})
	assert.Equal(t, http.StatusBadRequest, status, "amount <= 0")
}

func TestReadmeHandlerPatternIsThisFilesCode(t *testing.T) {
	snippet := readmeSnippet(t, filepath.Join("..", "..", "README.md"), "The pattern to copy, for a request handler")
	require.NotEmpty(t, snippet)
	src, err := os.ReadFile("readme_test.go")
	require.NoError(t, err)
	var code []string
	for line := range strings.Lines(string(src)) {
		code = append(code, strings.TrimSpace(line))
	}
	at := 0
	for _, want := range snippet {
		found := false
		for ; at < len(code); at++ {
			if sameStatement(code[at], want) {
				found = true
				break
			}
		}
		require.True(t, found, "README's snippet line %q is not, in this order, a line of readme_test.go", want)
	}
}

// sameStatement reports whether a line of this file is the README's line.
// The README's handler returns a status only, where this file's returns
// the receipt too: `return X, ledger.Receipt{}` stands for `return X`.
func sameStatement(code, readme string) bool {
	return code == readme || strings.Replace(code, ", ledger.Receipt{}", "", 1) == readme
}

// readmeSnippet returns the trimmed lines of the first go code block after
// the line that starts with intro, leaving out "..." and blank lines.
func readmeSnippet(t *testing.T, path, intro string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var lines []string
	seenIntro, inBlock := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case !seenIntro:
			seenIntro = strings.HasPrefix(line, intro)
		case !inBlock:
			inBlock = line == "```go"
		case line == "```":
			return lines
		case line != "" && line != "...":
			lines = append(lines, line)
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("%s: no go block after %q", path, intro)
	return nil
}
