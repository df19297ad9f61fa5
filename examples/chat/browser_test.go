package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seqsched/seqsched/examples/chat/internal/hub"
)

var hhmm = regexp.MustCompile(`^\d\d:\d\d$`)

// Two people chat in two tabs of a real browser (headless Chromium, the
// real page, the real server), one on a desktop-sized window and one on a
// phone-sized one: they see each other join and leave with the member
// count, their own messages set apart, every message with its time; a burst
// that the rate limit refuses in part shows every refused message to its
// sender as not delivered, text kept, with Retry; a kicked tab gets its
// kick message and nothing queued after it, and can reconnect; one tab
// sees the other typing; one tab kicks the other by typing "/kick name",
// and the kicked one again gets nothing queued after its kick; on shutdown
// both are told at once and their controls are disabled, and Reconnect
// brings them back. CHAT_SCREENSHOTS=dir saves what the tabs looked like.
func TestTwoBrowserTabsChat(t *testing.T) {
	path := browser(t)
	// The desk tab (client 1) can be held in the middle of one message,
	// "held back", so that more queue up behind it.
	const desk1 = hub.ClientID(1)
	held, open := make(chan struct{}), make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(open) }) }
	// The desk tab once reconnected (client 3) can be held the same way,
	// on "held again", before the phone kicks it from the page.
	const desk3 = hub.ClientID(3)
	heldAgain, openAgain := make(chan struct{}), make(chan struct{})
	var holdAgainOnce, releaseAgainOnce sync.Once
	releaseAgain := func() { releaseAgainOnce.Do(func() { close(openAgain) }) }
	srv := startServer(t, "0", func(cfg *hub.Config) {
		cfg.BeforeWrite = func(id hub.ClientID, data []byte) {
			if id == desk1 && bytes.Contains(data, []byte(`"text":"held back"`)) {
				holdOnce.Do(func() {
					close(held)
					<-open
				})
			}
			if id == desk3 && bytes.Contains(data, []byte(`"text":"held again"`)) {
				holdAgainOnce.Do(func() {
					close(heldAgain)
					<-openAgain
				})
			}
		}
	})
	t.Cleanup(release) // before the server stops, should the test fail while it holds
	t.Cleanup(releaseAgain)

	ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelAlloc() // waits for the browser to exit
	tab1, cancel1 := chromedp.NewContext(alloc)
	defer cancel1()
	desk := ui{t, tab1}
	desk.do(chromedp.EmulateViewport(1000, 700)) // starts the browser
	tab2, cancel2 := chromedp.NewContext(tab1)   // a second tab in the same browser
	defer cancel2()
	phone := ui{t, tab2}
	phone.do(chromedp.EmulateViewport(390, 700, chromedp.EmulateMobile, chromedp.EmulateTouch))

	// Join: each is welcomed with its name, and sees who is there.
	desk.do(chromedp.Navigate(srv.url))
	desk.until(`document.getElementById("status").dataset.state === "open"`)
	assert.Equal(t, "connected as guest-1", desk.text("status"))
	assert.Equal(t, "1 online", desk.text("members"))
	phone.do(chromedp.Navigate(srv.url))
	phone.until(`document.getElementById("status").dataset.state === "open"`)
	assert.Equal(t, "connected as guest-2", phone.text("status"))
	assert.Equal(t, "2 online", phone.text("members"))
	desk.until(`document.getElementById("members").textContent === "2 online"`)
	assert.Equal(t, []string{"You joined as guest-1", "guest-2 joined"}, desk.events())
	assert.Equal(t, []string{"You joined as guest-2"}, phone.events())
	enabled, reconnect := desk.controls()
	assert.True(t, enabled, "controls enabled while connected")
	assert.False(t, reconnect, "no Reconnect while connected")

	// A message from each: set apart on the sender's side, named on the
	// other's, both with the time.
	desk.say("hello from the desk")
	phone.until(`document.querySelectorAll("#log li.chat").length === 1`)
	phone.say("hi from the phone")
	desk.until(`document.querySelectorAll("#log li.chat").length === 2`)
	phone.until(`document.querySelector("#log li.chat.mine")?.dataset.state === "sent"`)
	for _, tab := range []ui{desk, phone} {
		got := tab.items()
		require.Len(t, got, 2)
		mine := tab == desk
		assert.Equal(t, []bool{mine, !mine}, []bool{got[0].Mine, got[1].Mine}, "own messages set apart")
		for i, it := range got {
			assert.Equal(t, []string{"hello from the desk", "hi from the phone"}[i], it.Text)
			assert.Regexp(t, hhmm, it.Time, "time shown")
			stamp, err := time.Parse(time.RFC3339, it.Stamp)
			if assert.NoError(t, err) {
				assert.WithinDuration(t, time.Now(), stamp, time.Minute)
			}
			if it.Mine {
				assert.Equal(t, "sent", it.State)
				assert.Empty(t, it.From, "no name on one's own messages")
			} else {
				assert.Equal(t, []string{"guest-1", "guest-2"}[i], it.From)
			}
		}
	}
	assert.Empty(t, eval[string](desk, `document.getElementById("text").value`), "the box is cleared once sent")
	desk.screenshot("desktop-chat")
	phone.screenshot("phone-chat")

	// The page works on a phone-sized window: nothing wider than it, the
	// Send button within it.
	fits := eval[bool](phone, `document.documentElement.scrollWidth <= innerWidth &&
		document.getElementById("send").getBoundingClientRect().right <= innerWidth`)
	assert.True(t, fits, "the phone-sized page overflows its width")

	// A burst of 30 quick messages: the rate limit (10 at once, 5 a second)
	// refuses most, and every one is accounted for on the sender's side.
	const burst = 30
	eval[int](desk, `(() => {
		const input = document.getElementById("text"), send = document.getElementById("send");
		for (let i = 0; i < `+strconv.Itoa(burst)+`; i++) { input.value = "quick " + i; send.click(); }
		return 0;
	})()`)
	desk.until(`document.querySelectorAll('#log li[data-state="pending"]').length === 0`)
	var sent, failed []string
	for _, it := range desk.items()[2:] {
		switch it.State {
		case "sent":
			sent = append(sent, it.Text)
		case "failed":
			failed = append(failed, it.Text)
			assert.Equal(t, "Not delivered: too fast: at most 5 messages a second (10 at once); try again", it.Failure)
			assert.True(t, it.Retry, "%q has no Retry", it.Text)
		default:
			t.Errorf("%q: state %q", it.Text, it.State)
		}
	}
	assert.Len(t, append(slices.Clone(sent), failed...), burst, "every message is shown as sent or not delivered")
	assert.NotEmpty(t, failed, "the rate limit refused none: the test proves nothing")
	assert.GreaterOrEqual(t, len(sent), 9, "the burst allowance (10), less the message said before")
	var all []string
	for i := range burst {
		all = append(all, fmt.Sprintf("quick %d", i))
	}
	assert.ElementsMatch(t, all, append(slices.Clone(sent), failed...), "each message once")
	assert.True(t, slices.IsSortedFunc(sent, func(a, b string) int { return cmpQuick(a, b) }), "sent in order: %q", sent)
	// The other tab got exactly the ones sent, in order.
	phone.until(`document.querySelectorAll("#log li.chat").length === ` + strconv.Itoa(2+len(sent)))
	var got []string
	for _, it := range phone.items()[2:] {
		got = append(got, it.Text)
	}
	assert.Equal(t, sent, got)

	// Retry delivers a refused message once the limit allows: each press is
	// answered (sent, or refused again) before the next.
	first := failed[0]
	retried := false
	for range 1000 {
		n := eval[int](desk, `(() => {
			const li = [...document.querySelectorAll('#log li.chat.mine[data-state="failed"]')].find(li => li.querySelector(".body").textContent === `+strconv.Quote(first)+`);
			li.querySelector(".retry").click();
			return 0;
		})()`)
		_ = n
		desk.until(`document.querySelectorAll('#log li[data-state="pending"]').length === 0`)
		if slices.ContainsFunc(desk.items(), func(it item) bool { return it.Text == first && it.State == "sent" }) {
			retried = true
			break
		}
	}
	require.True(t, retried, "Retry never delivered %q", first)
	phone.until(`[...document.querySelectorAll("#log li.chat")].some(li => li.querySelector(".body").textContent === ` + strconv.Quote(first) + `)`)
	last := phone.items()
	assert.Equal(t, first, last[len(last)-1].Text, "the retried message arrives last")
	desk.screenshot("desktop")
	phone.screenshot("phone")

	// Kick: while the desk tab is held in the middle of a message, more
	// chat and a (High) notice queue up behind it; then it is kicked. It
	// gets the message being written, the notice, its kick message, and
	// nothing after it: the chat queued for it is discarded. The phone
	// gets everything, and sees it leave.
	deskSeen, phoneChats := len(desk.log()), len(phone.items())
	srv.room.Broadcast("server", "held back")
	select {
	case <-held:
	case <-time.After(bound):
		t.Fatal("the desk tab's message was never written")
	}
	for i := range 3 {
		srv.room.Broadcast("server", fmt.Sprintf("queued %d", i))
	}
	srv.room.Notice("a notice before the kick")
	require.NoError(t, srv.room.Kick(desk1, "spamming"))
	srv.room.Notice("a notice after the kick") // to the phone only: the desk has left the room
	release()
	desk.until(`document.getElementById("status").dataset.state === "closed"`)
	assert.Equal(t, []string{"chat: held back", "notice: a notice before the kick", "kick: You were removed: spamming"},
		desk.log()[deskSeen:], "what the kicked tab got")
	assert.Equal(t, "Disconnected: kicked: spamming.", desk.text("closed-reason"))
	enabled, reconnect = desk.controls()
	assert.False(t, enabled, "controls disabled once kicked")
	assert.True(t, reconnect, "Reconnect offered")
	phone.until(`document.getElementById("members").textContent === "1 online"`)
	phone.until(`[...document.querySelectorAll("#log li.event")].some(li => li.lastChild.textContent === "a notice after the kick")`)
	phone.until(`document.querySelectorAll("#log li.chat").length === ` + strconv.Itoa(phoneChats+4))
	var phoneGot []string
	for _, it := range phone.items()[phoneChats:] {
		phoneGot = append(phoneGot, it.Text)
	}
	assert.Equal(t, []string{"held back", "queued 0", "queued 1", "queued 2"}, phoneGot)
	assert.Subset(t, phone.events(), []string{"a notice before the kick", "guest-1 left", "a notice after the kick"})
	desk.screenshot("desktop-kicked")
	// A kicked client may come back, as a new one.
	desk.do(chromedp.Click(chromedp.ID("reconnect")))
	desk.until(`document.getElementById("status").dataset.state === "open"`)
	assert.Equal(t, "connected as guest-3", desk.text("status"))
	phone.until(`document.getElementById("members").textContent === "2 online"`)

	// Typing: while the desk types, the phone says so; the message, once
	// sent, ends it.
	desk.do(chromedp.SendKeys(chromedp.ID("text"), "typed slowly"))
	phone.until(`document.getElementById("typing").textContent === "guest-3 is typing…"`)
	desk.do(chromedp.SendKeys(chromedp.ID("text"), "\r"))
	phone.until(`[...document.querySelectorAll("#log li.chat")].some(li => li.querySelector(".body").textContent === "typed slowly")`)
	assert.Empty(t, phone.text("typing"), "the indicator ends with the message")

	// Kick from the page: while the desk tab is held in the middle of a
	// message, with more chat queued behind it, the phone types
	// "/kick guest-3". The command is answered (no bubble stays for it)
	// and the room told; the desk gets the message being written, its
	// kick message, and nothing after it: the kick's task discarded the
	// rest of its session's queue.
	deskSeen = len(desk.log())
	srv.room.Broadcast("server", "held again")
	select {
	case <-heldAgain:
	case <-time.After(bound):
		t.Fatal("the desk tab's message was never written")
	}
	srv.room.Broadcast("server", "queued again")
	phone.say("/kick guest-3")
	phone.until(`[...document.querySelectorAll("#log li.event")].some(li => li.lastChild.textContent === "guest-3 was kicked by guest-2")`)
	phone.until(`document.querySelectorAll('#log li[data-state="pending"]').length === 0`)
	assert.False(t, slices.ContainsFunc(phone.items(), func(it item) bool { return strings.HasPrefix(it.Text, "/kick") }),
		"the answered command leaves no message behind")
	phone.until(`document.getElementById("members").textContent === "1 online"`)
	releaseAgain()
	desk.until(`document.getElementById("status").dataset.state === "closed"`)
	assert.Equal(t, []string{"chat: held again", "kick: You were removed: by guest-2"}, desk.log()[deskSeen:],
		"what the tab kicked from the page got")
	assert.Equal(t, "Disconnected: kicked: by guest-2.", desk.text("closed-reason"))
	assert.Subset(t, phone.events(), []string{"guest-3 left", "guest-3 was kicked by guest-2"})
	desk.screenshot("desktop-kicked-from-page")
	phone.screenshot("phone-kicked-from-page")
	desk.do(chromedp.Click(chromedp.ID("reconnect")))
	desk.until(`document.getElementById("status").dataset.state === "open"`)
	assert.Equal(t, "connected as guest-4", desk.text("status"))
	phone.until(`document.getElementById("members").textContent === "2 online"`)

	// Shutdown: both are told why, at once, and can only reconnect.
	stopping := time.Now()
	stopped := make(chan time.Duration, 1)
	go func() { // waited for below
		srv.stop()
		stopped <- time.Since(stopping)
	}()
	for _, tab := range []ui{desk, phone} {
		tab.until(`document.getElementById("status").dataset.state === "closed"`)
	}
	told := time.Since(stopping)
	t.Logf("shutdown: both tabs showed it after %v; the server had stopped after %v", told, <-stopped)
	for _, tab := range []ui{desk, phone} {
		assert.Equal(t, "disconnected", tab.text("status"))
		assert.Equal(t, "Disconnected: server shutting down.", tab.text("closed-reason"))
		assert.Equal(t, "server shutting down", tab.events()[len(tab.events())-1])
		enabled, reconnect := tab.controls()
		assert.False(t, enabled, "controls disabled once disconnected")
		assert.True(t, reconnect, "Reconnect offered")
		for _, it := range tab.items() {
			assert.False(t, it.Retry, "Retry enabled while disconnected: %q", it.Text)
		}
	}
	desk.screenshot("desktop-disconnected")
	phone.screenshot("phone-disconnected")

	// Reconnect, to the server started again on the same address.
	port := srv.url[strings.LastIndexByte(strings.TrimSuffix(srv.url, "/"), ':')+1 : len(srv.url)-1]
	again := startServer(t, port, nil)
	require.Equal(t, srv.url, again.url)
	desk.do(chromedp.Click(chromedp.ID("reconnect")))
	desk.until(`document.getElementById("status").dataset.state === "open"`)
	assert.Equal(t, "connected as guest-1", desk.text("status"))
	phone.do(chromedp.Click(chromedp.ID("reconnect")))
	phone.until(`document.getElementById("status").dataset.state === "open"`)
	desk.until(`document.getElementById("members").textContent === "2 online"`)
	enabled, reconnect = desk.controls()
	assert.True(t, enabled)
	assert.False(t, reconnect)
	phone.say("back again")
	desk.until(`[...document.querySelectorAll("#log li.chat")].some(li => li.querySelector(".body").textContent === "back again")`)
	again.stop()
}

// cmpQuick orders "quick N" messages by N.
func cmpQuick(a, b string) int {
	var x, y int
	fmt.Sscanf(a, "quick %d", &x)
	fmt.Sscanf(b, "quick %d", &y)
	return x - y
}
