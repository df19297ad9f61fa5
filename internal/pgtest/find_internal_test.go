package pgtest

import (
	"errors"
	"flag"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// Without binaries in PATH or under /usr/lib/postgresql, Find says so;
// with only Debian's versioned directories, it takes the newest.
func TestFindLooksInPathThenDebianNewestFirst(t *testing.T) {
	none := func(string) (string, error) { return "", exec.ErrNotFound }
	noDirs := func(string) ([]string, error) { return nil, nil }
	all := func(string) bool { return true }
	if _, err := find(none, noDirs, all); !errors.Is(err, ErrNoServer) {
		t.Fatalf("find with nothing installed = %v; want ErrNoServer", err)
	}
	inPath := func(name string) (string, error) { return "/opt/pg/bin/" + name, nil }
	if d, err := find(inPath, noDirs, all); err != nil || d != "/opt/pg/bin" {
		t.Fatalf("find in PATH = %q, %v; want /opt/pg/bin", d, err)
	}
	debian := func(string) ([]string, error) {
		return []string{"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/9/bin", "/usr/lib/postgresql/16/bin"}, nil
	}
	if d, err := find(none, debian, all); err != nil || d != "/usr/lib/postgresql/16/bin" {
		t.Fatalf("find under Debian's directories = %q, %v; want the newest, 16", d, err)
	}
}

// In CI (CI=true) a missing server fails the test instead of skipping it;
// elsewhere it skips, saying how to install one.
func TestMissingServerFailsOnlyInCI(t *testing.T) {
	if skip, msg := decide(true, ErrNoServer); skip {
		t.Fatalf("CI=true: the test skips (%s); want it to fail", msg)
	}
	skip, msg := decide(false, ErrNoServer)
	if !skip {
		t.Fatalf("outside CI: the test fails (%s); want it to skip", msg)
	}
	if want := "apt-get install postgresql"; !strings.Contains(msg, want) {
		t.Fatalf("skip message %q does not say %q", msg, want)
	}
	if skip, _ := decide(false, errors.New("initdb: disk full")); skip {
		t.Fatal("another error skips; want it to fail")
	}
}

// Without a server, outside CI, Main adds the examples named *_live to
// -test.skip (an example cannot skip itself), keeping the skips given;
// in CI it skips nothing, so that they run and fail.
func TestMissingServerSkipsTheLiveExamplesOnlyOutsideCI(t *testing.T) {
	f := flag.Lookup("test.skip")
	old := f.Value.String()
	t.Cleanup(func() { flag.Set("test.skip", old) })

	t.Setenv("CI", "true")
	skipLiveExamples(ErrNoServer)
	if got := f.Value.String(); got != old {
		t.Fatalf("CI=true: -test.skip = %q; want it unchanged, %q", got, old)
	}

	t.Setenv("CI", "")
	flag.Set("test.skip", "TestGiven")
	skipLiveExamples(ErrNoServer)
	re := regexp.MustCompile(f.Value.String())
	for name, want := range map[string]bool{
		"ExampleEnqueue_live": true, "Example_live": true, "TestGiven": true,
		"ExampleEnqueue": false, "ExampleLive": false, "TestOther": false,
	} {
		if got := re.MatchString(name); got != want {
			t.Errorf("-test.skip %q matches %s: %v; want %v", f.Value.String(), name, got, want)
		}
	}
}
