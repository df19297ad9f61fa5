package main

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// browserNames are the Chromium and Chrome binaries the browser tests run.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// errNoBrowser is findBrowser's answer when no browser is installed and
// the run is in CI, where a skipped browser test would let CI pass without
// it.
var errNoBrowser = errors.New("no chromium found in PATH, and CI=true: the browser test must run in CI " +
	"(Debian: apt-get install chromium; .ci/run installs it)")

// findBrowser returns the path of the first of browserNames that lookPath
// finds. When there is none it returns "" and, if ci is set, errNoBrowser.
func findBrowser(ci bool, lookPath func(string) (string, error)) (string, error) {
	for _, name := range browserNames {
		if path, err := lookPath(name); err == nil {
			return path, nil
		}
	}
	if ci {
		return "", errNoBrowser
	}
	return "", nil
}

// browser returns the browser to run, skips the test when there is none,
// and fails it instead when CI=true.
func browser(t *testing.T) string {
	t.Helper()
	path, err := findBrowser(os.Getenv("CI") == "true", exec.LookPath)
	if err != nil {
		t.Fatal(err)
	}
	if path == "" {
		t.Skip("skipping: no chromium found in PATH (Debian: apt-get install chromium; .ci/run installs it)")
	}
	return path
}

// In CI a missing browser fails the browser tests instead of skipping
// them; elsewhere they skip, saying so.
func TestBrowserMissingFailsOnlyInCI(t *testing.T) {
	none := func(name string) (string, error) { return "", exec.ErrNotFound }
	path, err := findBrowser(true, none)
	assert.ErrorIs(t, err, errNoBrowser, "CI=true")
	assert.Empty(t, path)
	path, err = findBrowser(false, none)
	assert.NoError(t, err, "outside CI the test skips")
	assert.Empty(t, path)

	only := func(name string) (string, error) {
		if name == "google-chrome" {
			return "fake/google-chrome", nil
		}
		return "", exec.ErrNotFound
	}
	path, err = findBrowser(true, only)
	assert.NoError(t, err)
	assert.Equal(t, "fake/google-chrome", path)
}

// The browser test itself, run as CI runs it but with no browser in PATH,
// fails and says why.
func TestBrowserTestFailsInCIWithoutBrowser(t *testing.T) {
	if os.Getenv("CHAT_BROWSER_CHILD") != "" {
		t.Skip("in the child")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run", "^TestTwoBrowserTabsChat$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CI=true", "PATH="+t.TempDir(), "CHAT_BROWSER_CHILD=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the child passed:\n%s", out)
	assert.Equal(t, 1, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "--- FAIL: TestTwoBrowserTabsChat")
	assert.Contains(t, string(out), "CI=true: the browser test must run in CI")
	assert.NotContains(t, string(out), "SKIP")
}
