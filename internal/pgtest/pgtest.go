// Package pgtest starts a throwaway PostgreSQL server for a test: initdb in
// a fresh directory, a unix socket in that directory and no TCP listener,
// fsync off, stopped when the test ends. The modules that meet PostgreSQL
// (seqpg, examples/bank) share it rather than each copying a harness. It
// is internal, for tests only, and uses the standard library and goleak.
//
// The server's binaries are looked up in PATH, then under
// /usr/lib/postgresql/*/bin (where Debian's postgresql package puts them).
// Without them [Start] (and [Skip], given [New]'s error) skips the test, saying how to install them, or
// fails it when CI=true: a CI run must not pass by skipping. Run as root,
// the server runs as the postgres user when there is one, since
// PostgreSQL refuses to run as root.
//
// A test package whose tests share one server has [Main] as its TestMain
// and gets the server from [Shared].
package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// ErrNoServer is Find's error when no PostgreSQL binaries are installed.
var ErrNoServer = errors.New("pgtest: no PostgreSQL server found in PATH or /usr/lib/postgresql/*/bin " +
	"(Debian: apt-get install postgresql; .ci/run installs it)")

// Find returns the directory holding initdb and postgres, or ErrNoServer.
func Find() (string, error) { return find(exec.LookPath, filepath.Glob, isFile) }

// find is Find with its look-ups passed in, for its tests.
func find(lookPath func(string) (string, error), glob func(string) ([]string, error), exists func(string) bool) (string, error) {
	if p, err := lookPath("initdb"); err == nil {
		if _, err := lookPath("postgres"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := glob("/usr/lib/postgresql/*/bin")
	// The newest version first: the glob sorts "9" after "15", so sort by
	// the version number.
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if exists(filepath.Join(d, "initdb")) && exists(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNoServer
}

func version(binDir string) int {
	n := 0
	fmt.Sscan(filepath.Base(filepath.Dir(binDir)), &n)
	return n
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// Server is a running PostgreSQL server.
type Server struct {
	// DSN connects to the server's postgres database as the superuser
	// postgres, through the unix socket, in the key=value form pgx and
	// libpq read.
	DSN string
	// Dir holds the data directory (Dir/data), the socket and the log.
	Dir string

	bin  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start starts a server for tb (see New), and closes it when tb ends. It
// skips tb when no server is installed, and fails it when CI=true.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := New()
	if err != nil {
		Skip(tb, err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Skip is what a test does when New returned err in TestMain: it skips
// the test when no server is installed, fails it when CI=true or for any
// other error.
func Skip(tb testing.TB, err error) {
	tb.Helper()
	if skip, msg := decide(os.Getenv("CI") == "true", err); skip {
		tb.Skip(msg)
	} else {
		tb.Fatal(msg)
	}
}

// decide says whether a test that could not get a server because of err
// skips (only when none is installed, outside CI) or fails, and why.
func decide(ci bool, err error) (skip bool, msg string) {
	switch {
	case errors.Is(err, ErrNoServer) && !ci:
		return true, "skipping: " + err.Error()
	case errors.Is(err, ErrNoServer):
		return false, err.Error() + "; CI=true: the PostgreSQL tests must run in CI"
	}
	return false, err.Error()
}

// New initialises and starts a server in a fresh directory, for a
// TestMain to share among its tests; Close stops it and removes the
// directory. It returns ErrNoServer when no server is installed.
func New() (*Server, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, bin: bin}
	fail := func(err error) (*Server, error) {
		s.Close()
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(err)
	}
	if err := own(dir); err != nil {
		return fail(err)
	}
	data := filepath.Join(dir, "data")
	out, err := s.command("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--no-sync", "--no-instructions", "--locale=C").CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("pgtest: initdb: %v\n%s", err, out))
	}
	s.DSN = fmt.Sprintf("host=%s port=5432 user=postgres dbname=postgres sslmode=disable", dir)
	if err := s.Restart(); err != nil {
		return fail(err)
	}
	return s, nil
}

// Close stops the server and removes its files.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.Dir)
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.Dir
	setCredential(cmd)
	return cmd
}

// Restart starts the server again after Stop or Kill (New starts it the
// first time), and returns once it accepts connections.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("pgtest: Restart of a running server")
	}
	cmd := s.command("postgres", "-D", filepath.Join(s.Dir, "data"), "-k", s.Dir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "log_min_messages=warning")
	dieWithParent(cmd)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(s.Dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("pgtest: postgres: %w", err)
	}
	ready := make(chan struct{})
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		defer log.Close()
		sc := bufio.NewScanner(stderr)
		seen := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(log, line)
			if !seen && strings.Contains(line, "ready to accept connections") {
				seen = true
				close(ready)
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	done := make(chan struct{})
	go func() {
		<-copied // Wait must not close the pipe before it is drained
		cmd.Wait()
		close(done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case <-ready:
	case <-done:
		b, _ := os.ReadFile(filepath.Join(s.Dir, "log"))
		return fmt.Errorf("pgtest: postgres exited at start:\n%s", b)
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		return errors.New("pgtest: postgres not ready after a minute")
	}
	s.cmd, s.done = cmd, done
	return nil
}

// Stop shuts the server down fast (SIGINT: running transactions are rolled
// back) and waits for it to exit. Stop of a stopped server does nothing.
func (s *Server) Stop() { s.signal(os.Interrupt) }

// Kill stops the server as a crash would (SIGQUIT: no checkpoint; the next
// Restart recovers from the write-ahead log) and waits for it to exit.
func (s *Server) Kill() { s.signal(quit) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	<-s.done
	s.cmd, s.done = nil, nil
}
