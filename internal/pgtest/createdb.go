package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// dbSeq numbers the databases CreateDB makes in this process.
var dbSeq atomic.Int64

// CreateDB creates a fresh, empty database on s for tb, as
// CreateDatabase does, and returns its DSN; a failure fails tb.
func (s *Server) CreateDB(tb testing.TB) (dsn string) {
	tb.Helper()
	dsn, err := s.CreateDatabase()
	if err != nil {
		tb.Fatal(err)
	}
	return dsn
}

// CreateDatabase creates a fresh, empty database on s with the server's
// own createdb program, and returns its DSN (s.DSN naming the new
// database). Each call makes a new database, named after the process and
// a counter, so that tests in parallel and test binaries sharing a
// server never meet; it lasts as long as the server. It is CreateDB for
// what has no testing.TB: an Example.
func (s *Server) CreateDatabase() (dsn string, err error) {
	name := fmt.Sprintf("pgtest_%d_%d", os.Getpid(), dbSeq.Add(1))
	prog, err := s.client("createdb")
	if err != nil {
		return "", err
	}
	cmd := exec.Command(prog, "-h", s.Dir, "-p", "5432", "-U", "postgres", name)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=60")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pgtest: createdb %s: %v\n%s", name, err, strings.TrimSpace(string(out)))
	}
	return s.DSN + " dbname=" + name, nil
}

// client returns the path of one of the server's client programs: beside
// the server's binaries, or beside what they link to (PATH may hold links
// to initdb and postgres alone, as a package's alternatives do), or in
// PATH.
func (s *Server) client(name string) (string, error) {
	if p := filepath.Join(s.bin, name); isFile(p) {
		return p, nil
	}
	if real, err := filepath.EvalSymlinks(filepath.Join(s.bin, "initdb")); err == nil {
		if p := filepath.Join(filepath.Dir(real), name); isFile(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("pgtest: %s not found beside %s or in PATH: %w", name, s.bin, err)
	}
	return p, nil
}
