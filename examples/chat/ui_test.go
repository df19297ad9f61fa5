package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// ui drives one browser tab.
type ui struct {
	t   *testing.T
	ctx context.Context // a chromedp tab
}

// do runs actions in the tab.
func (u ui) do(actions ...chromedp.Action[chromedp.Void]) {
	u.t.Helper()
	require.NoError(u.t, chromedp.Do(u.ctx, actions...))
}

// until waits until the JavaScript expression is true. The page is polled
// on every DOM change, which is when its answer can change.
func (u ui) until(expr string) {
	u.t.Helper()
	_, err := chromedp.Run(u.ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(bound)))
	require.NoError(u.t, err, "waiting for %s", expr)
}

// eval returns the value of a JavaScript expression.
func eval[T any](u ui, expr string) T {
	u.t.Helper()
	v, err := chromedp.Run(u.ctx, chromedp.Evaluate[T](expr))
	require.NoError(u.t, err, expr)
	return v
}

// text returns the text of the element with the given id.
func (u ui) text(id string) string {
	u.t.Helper()
	return eval[string](u, `document.getElementById(`+strconv.Quote(id)+`).textContent`)
}

// item is a chat message as the page shows it.
type item struct {
	Mine    bool   `json:"mine"`
	State   string `json:"state"` // mine: pending, sent or failed
	From    string `json:"from"`
	Text    string `json:"text"`
	Time    string `json:"time"`     // as shown
	Stamp   string `json:"datetime"` // the time element's datetime
	Failure string `json:"failure"`
	Retry   bool   `json:"retry"` // a Retry button is shown and enabled
}

// items returns the chat messages in the page's log, top to bottom.
func (u ui) items() []item {
	u.t.Helper()
	return eval[[]item](u, `[...document.querySelectorAll("#log li.chat")].map(li => ({
		mine: li.classList.contains("mine"),
		state: li.dataset.state || "",
		from: li.querySelector(".from")?.textContent || "",
		text: li.querySelector(".body").textContent,
		time: li.querySelector("time")?.textContent || "",
		datetime: li.querySelector("time")?.dateTime || "",
		failure: li.querySelector(".failure")?.firstChild.textContent || "",
		retry: !!li.querySelector(".retry:enabled"),
	}))`)
}

// events returns the text of the log's event lines (joins, leaves,
// notices), top to bottom, without their time.
func (u ui) events() []string {
	u.t.Helper()
	return eval[[]string](u, `[...document.querySelectorAll("#log li.event")].map(li => li.lastChild.textContent)`)
}

// log returns the log's lines, top to bottom, without their time: "chat:
// " and a message's text, or an event's kind (welcome, join, leave, notice,
// warn, kick), ": " and its text.
func (u ui) log() []string {
	u.t.Helper()
	return eval[[]string](u, `[...document.querySelectorAll("#log li")].map(li => li.classList.contains("chat") ?
		"chat: " + li.querySelector(".body").textContent :
		li.classList[1] + ": " + li.lastChild.textContent)`)
}

// say types text and presses Enter.
func (u ui) say(text string) {
	u.t.Helper()
	u.do(chromedp.SendKeys(chromedp.ID("text"), text+"\r"))
}

// controls reports whether the message box and Send are enabled, and
// whether the Reconnect bar is shown.
func (u ui) controls() (enabled, reconnect bool) {
	u.t.Helper()
	v := eval[[]bool](u, `[!document.getElementById("text").disabled && !document.getElementById("send").disabled,
		!document.getElementById("closed").hidden && !document.getElementById("reconnect").disabled]`)
	return v[0], v[1]
}

// screenshot saves the tab's viewport as name.png in $CHAT_SCREENSHOTS, if
// set, for a person to look at.
func (u ui) screenshot(name string) {
	u.t.Helper()
	dir := os.Getenv("CHAT_SCREENSHOTS")
	png, err := chromedp.Run(u.ctx, chromedp.CaptureScreenshot())
	require.NoError(u.t, err)
	require.NotEmpty(u.t, png)
	if dir != "" {
		file := filepath.Join(dir, name+".png")
		require.NoError(u.t, os.WriteFile(file, png, 0o644))
		u.t.Logf("screenshot: %s", file)
	}
}
