package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// postgresDSN is set while TestPostgres reruns the tests on Postgres.
var postgresDSN string

// testDSN is a fresh SQLite file, or, under TestPostgres, the Postgres
// database with its tables emptied.
func testDSN(t testing.TB) string {
	t.Helper()
	if postgresDSN == "" {
		return filepath.Join(t.TempDir(), "bank.db")
	}
	db, err := OpenDB(context.Background(), postgresDSN)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`DELETE FROM ledger`)
	require.NoError(t, err)
	_, err = db.Exec(`DELETE FROM accounts`)
	require.NoError(t, err)
	_, err = db.Exec(`DELETE FROM requests`)
	require.NoError(t, err)
	return postgresDSN
}

// newBank opens a bank on a fresh database; it is closed when the test ends.
func newBank(t testing.TB, cfg Config) (*Bank, *sql.DB) {
	t.Helper()
	return newBankOn(t, testDSN(t), cfg)
}

func newBankOn(t testing.TB, dsn string, cfg Config) (*Bank, *sql.DB) {
	t.Helper()
	db, err := OpenDB(context.Background(), dsn)
	require.NoError(t, err)
	b, err := New(db, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, b.Close(context.Background()))
		require.NoError(t, db.Close())
	})
	return b, db
}

// await returns a function that waits for an accepted operation, so that
// it can wrap a call: await(t)(b.Deposit(ctx, 1, 5)).
func await(t testing.TB) func(Pending, error) (Receipt, error) {
	return func(p Pending, err error) (Receipt, error) {
		t.Helper()
		require.NoError(t, err, "operation refused")
		return p.Await(context.Background())
	}
}

// must is await for an operation that must succeed.
func must(t testing.TB) func(Pending, error) Receipt {
	return func(p Pending, err error) Receipt {
		t.Helper()
		r, err := await(t)(p, err)
		require.NoError(t, err)
		return r
	}
}

// dump returns the whole database as text, to compare before and after.
func dump(t testing.TB, db *sql.DB) []string {
	t.Helper()
	var out []string
	rows, err := db.Query(`SELECT id, balance, frozen, version FROM accounts ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id, balance, version int64
		var frozen bool
		require.NoError(t, rows.Scan(&id, &balance, &frozen, &version))
		out = append(out, fmt.Sprintf("account %d balance=%d frozen=%v version=%d", id, balance, frozen, version))
	}
	require.NoError(t, rows.Err())
	rows, err = db.Query(`SELECT account, version, op, amount, balance FROM ledger ORDER BY account, version`)
	require.NoError(t, err)
	for rows.Next() {
		var account, version, amount, balance int64
		var op string
		require.NoError(t, rows.Scan(&account, &version, &op, &amount, &balance))
		out = append(out, fmt.Sprintf("ledger %d/%d %s %d -> %d", account, version, op, amount, balance))
	}
	require.NoError(t, rows.Err())
	return out
}

// gate occupies id's session until release is called, so that operations
// submitted meanwhile queue up behind it.
func gate(t testing.TB, b *Bank, id AccountID) (release func()) {
	t.Helper()
	started, open := make(chan struct{}), make(chan struct{})
	f, err := b.sched.Go(context.Background(), id, func(context.Context) error {
		close(started)
		<-open
		return nil
	})
	require.NoError(t, err)
	<-started
	var once sync.Once
	// A test that fails before it releases the gate must not leave the
	// bank's Close (its cleanup, registered earlier, so run later)
	// waiting for the gate for good.
	t.Cleanup(func() { once.Do(func() { close(open) }) })
	return func() {
		once.Do(func() { close(open) })
		_, err := f.Await(context.Background())
		require.NoError(t, err)
	}
}

// blockingWriter is a journal whose writes wait until released.
type blockingWriter struct {
	open  chan struct{}
	mu    sync.Mutex
	lines []string
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.open
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, string(p))
	return len(p), nil
}

func (w *blockingWriter) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}
