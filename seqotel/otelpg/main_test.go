package otelpg_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/seqsched/seqsched/internal/pgtest"
	"go.uber.org/goleak"
)

// server is the PostgreSQL server the live tests share; each gets its own
// database on it.
var (
	server    *pgtest.Server
	serverErr error
)

func TestMain(m *testing.M) {
	server, serverErr = pgtest.New()
	code := m.Run()
	if server != nil {
		server.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
