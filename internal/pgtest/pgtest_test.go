package pgtest_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seqsched/seqsched/internal/pgtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "no-server" {
		// A child run of TestAGivenSkipOfASubtestHoldsBesideTheLiveExamples:
		// what Main does when there is no server.
		pgtest.SkipLiveExamples(pgtest.ErrNoServer)
	}
	goleak.VerifyTestMain(m)
}

// The server listens on its unix socket, and again after a crash and a
// restart.
func TestStartKillRestart(t *testing.T) {
	s := pgtest.Start(t)
	sock := filepath.Join(s.Dir, ".s.PGSQL.5432")
	dial := func() error {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(); err != nil {
		t.Fatalf("dial after Start: %v", err)
	}
	s.Kill()
	if err := dial(); err == nil {
		t.Fatal("dial after Kill succeeded")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := dial(); err != nil {
		t.Fatalf("dial after Restart: %v", err)
	}
}

// Each CreateDB makes a new database on the server, named in its DSN.
func TestCreateDBMakesADatabasePerCall(t *testing.T) {
	s := pgtest.Start(t)
	a, b := s.CreateDB(t), s.CreateDB(t)
	if a == b {
		t.Fatalf("two CreateDB calls returned one DSN %q", a)
	}
	out, err := exec.Command("psql", "-h", s.Dir, "-U", "postgres", "-Atc", "SELECT datname FROM pg_database ORDER BY oid", "postgres").CombinedOutput()
	if err != nil {
		t.Fatalf("psql: %v\n%s", err, out)
	}
	for _, dsn := range []string{a, b} {
		name := dsn[strings.LastIndex(dsn, "dbname=")+len("dbname="):]
		if !strings.Contains("\n"+string(out), "\n"+name+"\n") {
			t.Errorf("database %q of DSN %q not on the server; it has:\n%s", name, dsn, out)
		}
	}
}
