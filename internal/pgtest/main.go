package pgtest

import (
	"flag"
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
// The tests get the server from Shared, the examples from SharedServer.
//
// An example cannot skip itself, so Main skips the examples that need the
// server, those whose name ends in "_live" (ExampleEnqueue_live), when
// a test would skip: no server installed, outside CI. In CI they run,
// and fail without a server, as the tests do.
func Main(m *testing.M) {
	shared.s, shared.err = New()
	if shared.s == nil {
		skipLiveExamples(shared.err)
	}
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

// liveExamples matches the names of the examples that need the server.
const liveExamples = `^Example.*_live$`

// skipLiveExamples adds the live examples to -test.skip when a test
// given err would skip.
func skipLiveExamples(err error) {
	skip, msg := decide(os.Getenv("CI") == "true", err)
	if !skip {
		return
	}
	flag.Parse()
	// The testing package splits a -skip pattern at each unbracketed "|"
	// into alternatives, and each alternative at each unbracketed "/"
	// into one pattern per level of subtest. So the live examples are
	// one more alternative, and the given pattern stays as it is: in
	// "(?:" + given + ")" its "/" would be bracketed, and -skip
	// 'TestA/sub' would stop skipping TestA's subtest sub.
	pattern := liveExamples
	if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
		pattern = f.Value.String() + "|" + pattern
	}
	if err := flag.Set("test.skip", pattern); err == nil {
		fmt.Fprintln(os.Stderr, "pgtest: "+msg+"; the live examples are skipped too")
	}
}

// SharedServer returns the server Main started, or why it has none: the
// examples' Shared, which has no testing.TB to skip or fail.
func SharedServer() (*Server, error) {
	if shared.s == nil {
		if shared.err == nil {
			return nil, fmt.Errorf("pgtest: SharedServer without pgtest.Main in the package's TestMain")
		}
		return nil, shared.err
	}
	return shared.s, nil
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
