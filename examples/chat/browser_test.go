package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
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

// A person opens the page in two tabs: what they type in one appears in
// the other. Headless Chromium drives the real page over the real server.
func TestTwoBrowserTabsChat(t *testing.T) {
	path := browser(t)
	url := server(t)

	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelAlloc() // waits for the browser to exit
	open := func(tab context.Context, want string) {
		t.Helper()
		require.NoError(t, chromedp.Do(tab,
			chromedp.Navigate(url),
			chromedp.WaitVisible(chromedp.CSS(`#status[data-state="open"]`)),
		))
		status, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("status")))
		require.NoError(t, err)
		assert.Equal(t, want, status)
	}
	tab1, cancel1 := chromedp.NewContext(alloc)
	defer cancel1()
	open(tab1, "connected as guest-1")         // starts the browser
	tab2, cancel2 := chromedp.NewContext(tab1) // a second tab in the same browser
	defer cancel2()
	open(tab2, "connected as guest-2")

	require.NoError(t, chromedp.Do(tab1,
		chromedp.SendKeys(chromedp.ID("text"), "hello from tab 1"),
		chromedp.Click(chromedp.ID("send")),
	))
	require.NoError(t, chromedp.Do(tab2,
		chromedp.WaitVisible(chromedp.Search(`//ul[@id="log"]/li[contains(., "hello from tab 1")]`)),
	))
	line, err := chromedp.Run(tab2, chromedp.Text(chromedp.CSS(`#log li:last-child`)))
	require.NoError(t, err)
	assert.Equal(t, "guest-1: hello from tab 1", line)
}
