package pgtest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// shared is the server Main started for its test binary, or why it has
// none.
var shared struct {
	s   *Server
	err error
}

// Main is the TestMain of a test package whose tests share one server:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// It starts the server (New), runs the tests, stops the server, and then,
// if the tests passed, fails the run when a goroutine leaked, as
// goleak.VerifyTestMain does (after the server's own goroutines have
// ended). It exits the process with the run's code; it does not return.
// The tests get the server from Shared.
func Main(m *testing.M) {
	shared.s, shared.err = New()
	code := m.Run()
	if shared.s != nil {
		shared.s.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Shared returns the server Main started. When Main could not start one,
// it skips tb (no server installed) or fails it (CI=true, or any other
// error), as Skip does; outside Main it fails tb.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	if shared.s == nil {
		err := shared.err
		if err == nil {
			err = fmt.Errorf("pgtest: Shared without pgtest.Main in the package's TestMain")
		}
		Skip(tb, err)
	}
	return shared.s
}
