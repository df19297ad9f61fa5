package pgtest_test

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/seqsched/seqsched/internal/pgtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
