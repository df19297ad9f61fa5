package main

import (
	"context"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromium returns the path of a Chromium or Chrome binary, or "".
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	return ""
}

// A person opens the page in two tabs: what they type in one appears in
// the other. Headless Chromium drives the real page over the real server.
func TestTwoBrowserTabsChat(t *testing.T) {
	path := chromium()
	if path == "" {
		t.Skip("skipping: no chromium found in PATH (Debian: apt-get install chromium; .ci/run installs it)")
	}
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
