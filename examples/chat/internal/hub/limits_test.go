package hub

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// The room's bounds: what all clients together may say, how many may
// connect, how long one that does not answer stays, and what joins, leaves
// and typing cost.

// The room accepts at most RoomBurst messages at once from everyone
// together; beyond that each is refused, to its sender, with the reason.
func TestRoomBudgetRefusesChatBeyondIt(t *testing.T) {
	r := newRoom(t, Config{RoomRate: rate.Every(time.Hour), RoomBurst: 3})
	a, b := r.dial(t), r.dial(t)
	for i, said := range []struct {
		p   *peer
		ref string
	}{{a, "a1"}, {b, "b1"}, {a, "a2"}} {
		said.p.sayRef(said.ref, said.ref)
		assert.Equal(t, Message{Type: KindChat, Seq: uint64(i + 1), At: testAt, From: fmt.Sprintf("guest-%d", said.p.id), Ref: said.ref, Text: said.ref}, said.p.read2(said.ref))
	}
	b.sayRef("b2", "b2")
	assert.Equal(t, Message{Type: KindRefused, Ref: "b2",
		Text: "the room is busy: at most 0.0002777777777777778 messages a second from everyone (3 at once); try again"}, b.read2("b2"))
	r.Broadcast("server", "end")
	assert.Equal(t, "end", a.read().Text, "b2 must not have been said")
}

// read2 returns the next message that is not chat said before ref's
// answer: the answer to ref.
func (p *peer) read2(ref string) Message {
	p.t.Helper()
	for {
		if m := p.read(); m.Ref == ref {
			return m
		}
	}
}

// A member that reads but has fallen half a queue behind is waited for:
// chat is refused as busy until it catches up. One that does not read (a
// write to it blocked) is not waited for.
func TestRoomWaitsForAMemberBehind(t *testing.T) {
	const maxQueue = 8
	r := newRoom(t, Config{MaxQueue: maxQueue, PresenceEvery: time.Hour}) // no presence task in the queues
	speaker, behind := r.dial(t), r.dial(t)
	release := r.gate(t, behind.id) // its session busy, not in a write: it reads, slowly
	for i := range maxQueue / 2 {
		speaker.sayRef(fmt.Sprint(i), fmt.Sprint(i))
		assert.Equal(t, fmt.Sprint(i), speaker.read().Text)
	}
	speaker.sayRef("one too many", "x")
	assert.Equal(t, Message{Type: KindRefused, Ref: "x", Text: "the room is busy: members are behind; try again"}, speaker.read2("x"))
	release()
	for i := range maxQueue / 2 {
		assert.Equal(t, fmt.Sprint(i), behind.read().Text)
	}
	speaker.sayRef("caught up", "y")
	assert.Equal(t, "caught up", behind.read().Text)
}

// A member behind for LagLimit is no longer waited for: the room goes on,
// and the member, once its queue is full, is dropped with the reason.
func TestRoomStopsWaitingForAMemberBehindTooLong(t *testing.T) {
	const maxQueue = 4
	r := newRoom(t, Config{MaxQueue: maxQueue, LagLimit: time.Nanosecond, PresenceEvery: time.Hour})
	speaker, behind := r.dial(t), r.dial(t)
	release := r.gate(t, behind.id)
	defer release()
	var answers []string
	for i := range 7 {
		speaker.sayRef(fmt.Sprint(i), fmt.Sprint(i))
		a := speaker.read()
		answers = append(answers, string(a.Type)+" "+a.Ref)
	}
	// "2" finds the member half a queue behind for the first time and is
	// refused; from "3" on it has been behind for LagLimit. "5" finds its
	// queue (0, 1, 3, 4) full.
	assert.Equal(t, []string{"chat 0", "chat 1", "refused 2", "chat 3", "chat 4", "chat 5", "chat 6"}, answers)
	assert.Equal(t, behind.id, <-r.leftRoom)
	release()
	for { // read, so that the close is answered
		if _, err := behind.next(); err != nil {
			assert.Regexp(t, `too slow: 4 messages waiting, behind for \d`, err.Error())
			break
		}
	}
	assert.Regexp(t, `^too slow: 4 messages waiting, behind for \d`, <-r.left)
}

// The close reason is the truth: a member the room stopped waiting for
// after LagLimit is dropped as behind, although a write to it was in
// progress (it reads, slowly) when its queue filled; only a write blocked
// for notReading makes a member "not reading".
func TestMemberBehindIsNotCalledNotReading(t *testing.T) {
	const maxQueue = 4
	var hold atomic.Uint64 // the client whose next write is held
	holding, release := make(chan struct{}), make(chan struct{})
	r := newRoom(t, Config{MaxQueue: maxQueue, LagLimit: time.Nanosecond, PresenceEvery: time.Hour,
		BeforeWrite: func(id ClientID, _ []byte) {
			if hold.CompareAndSwap(uint64(id), 0) {
				close(holding)
				<-release
			}
		}})
	r.mu.Lock()
	r.notReading = bound // the held write is in progress, not blocked, however slow the machine
	r.mu.Unlock()
	speaker, behind := r.dial(t), r.dial(t)
	hold.Store(uint64(behind.id))
	speaker.sayRef("held", "h")
	assert.Equal(t, "held", speaker.read().Text)
	<-holding
	var answers []string
	for i := range 7 { // as in TestRoomStopsWaitingForAMemberBehindTooLong
		speaker.sayRef(fmt.Sprint(i), fmt.Sprint(i))
		a := speaker.read()
		answers = append(answers, string(a.Type)+" "+a.Ref)
	}
	assert.Equal(t, []string{"chat 0", "chat 1", "refused 2", "chat 3", "chat 4", "chat 5", "chat 6"}, answers)
	assert.Equal(t, behind.id, <-r.leftRoom)
	close(release)
	assert.Equal(t, "held", behind.read().Text, "the write in progress")
	_, err := behind.next()
	assert.Regexp(t, `too slow: 4 messages waiting, behind for \d`, err.Error())
	assert.Regexp(t, `^too slow: 4 messages waiting, behind for \d`, <-r.left)
}

// Beyond MaxConns connections, or MaxConnsPerAddr from one address, a new
// one is refused before the upgrade; a closed one makes room.
func TestConnectionsAreCapped(t *testing.T) {
	for name, cfg := range map[string]Config{
		"room": {MaxConns: 2},
		"addr": {MaxConnsPerAddr: 2},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRoom(t, cfg)
			first, _ := r.dial(t), r.dial(t)
			_, resp, err := websocket.Dial(context.Background(), r.url, nil)
			require.Error(t, err)
			require.NotNil(t, resp)
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			require.NoError(t, first.conn.Close(websocket.StatusNormalClosure, "bye"))
			<-r.left // the handler is about to return, and to give its place back
			require.Eventually(t, func() bool {
				conn, _, err := websocket.Dial(context.Background(), r.url, nil)
				if err == nil {
					conn.CloseNow()
				}
				return err == nil
			}, bound, time.Millisecond, "a closed connection made no room")
		})
	}
}

// A client that does not answer a ping within PingTimeout (it does not
// read) is closed with the reason; one that reads stays.
func TestUnansweredPingClosesTheConnection(t *testing.T) {
	// The reader must answer within PingTimeout on a loaded machine.
	r := newRoom(t, Config{PingEvery: 20 * time.Millisecond, PingTimeout: 2 * time.Second})
	reader := r.dial(t)
	readerDone := make(chan error, 1)
	go func() { // ends when the test closes the connection
		for {
			if _, err := reader.next(); err != nil {
				readerDone <- err
				return
			}
		}
	}()
	mute, err := dialRaw(r.url) // never reads: its pongs are never sent
	require.NoError(t, err)
	defer mute.CloseNow()
	assert.Equal(t, "no answer to a ping within 2s", <-r.left)
	assert.Equal(t, 1, r.Clients(), "the reader stays")
	require.NoError(t, reader.conn.Close(websocket.StatusNormalClosure, "bye"))
	<-readerDone
}

// A client's frames are read at most ReadRate a second, ReadBurst at
// once, whatever they hold: a flood of typing toggles (20,000 in 35ms,
// before the limit) waits in TCP, not in the room. With a burst of 3 and
// no refill, the fourth frame is never read.
func TestFramesAreReadAtTheReadRate(t *testing.T) {
	r := newRoom(t, Config{ReadRate: rate.Every(1 << 62), ReadBurst: 3})
	p := r.dial(t)
	r.mu.Lock()
	c := r.clients[p.id]
	r.mu.Unlock()
	for i := range 3 {
		p.send(fmt.Sprintf(`{"typing":%v}`, i%2 == 0))
	}
	p.say("never read")
	// The read loop read the three toggles and now waits for a fourth
	// token, which does not come.
	require.Eventually(t, func() bool { return c.reads.Tokens() < 0 }, bound, time.Millisecond, "frames read without a wait")
	r.Broadcast("server", "end")
	assert.Equal(t, "end", p.read().Text, "the fourth frame was read")
	r.mu.Lock()
	assert.Equal(t, c, r.typers[p.id], "the toggles were read: on, off, on")
	r.mu.Unlock()
}

// A join costs the room one task, the newcomer's welcome, however many
// members there are: the others hear of joins with the next presence
// flush, all of them in one task each.
func TestJoinsCostOneTaskEach(t *testing.T) {
	const joins = 50
	r := newRoom(t, Config{PresenceEvery: time.Hour}) // flushed by the test
	watcher := r.dial(t)
	r.flushPresence()
	before := r.Stats()
	for range joins {
		r.dial(t)
	}
	assert.Equal(t, uint64(joins), r.Stats().Submitted-before.Submitted, "tasks posted by the joins")
	r.flushPresence()
	for i := range joins {
		assert.Equal(t, Message{Type: KindJoin, At: testAt, Name: fmt.Sprintf("guest-%d", i+2), Members: i + 2}, watcher.readAny())
	}
}

// A client that toggles typing thousands of times costs the others
// nothing until the flush, and then one indicator each: its latest state.
func TestTypingFloodCostsTheOthersOneIndicator(t *testing.T) {
	r := newRoom(t, Config{PresenceEvery: time.Hour})
	watcher, typer := r.dial(t), r.dial(t)
	r.flushPresence()
	assert.Equal(t, KindJoin, watcher.readAny().Type)
	before := r.Stats()
	for i := range 2001 { // on, off, ..., on
		typer.send(fmt.Sprintf(`{"typing":%v}`, i%2 == 0))
	}
	typer.say("done") // read after every toggle
	assert.Equal(t, "done", typer.read().Text)
	assert.Equal(t, "done", watcher.readAny().Text)
	assert.Equal(t, uint64(2), r.Stats().Submitted-before.Submitted, "tasks: the chat, to each")
	r.flushPresence()
	r.Broadcast("server", "end")
	assert.Equal(t, Message{Type: KindTyping, Name: "guest-2", Typing: true}, watcher.readAny(), "the latest state")
	assert.Equal(t, "end", watcher.readAny().Text)
}

// More joins and leaves than the room remembers, while a member's
// presence task waits: it gets a notice of how many it missed, then the
// latest ones.
func TestMissedPresenceIsCounted(t *testing.T) {
	r := newRoom(t, Config{PresenceEvery: time.Hour})
	watcher := r.dial(t)
	for range maxPresenceLog/2 + 1 { // a join and a leave each
		p := r.dial(t)
		require.NoError(t, p.conn.Close(websocket.StatusNormalClosure, "bye"))
		<-r.leftRoom
	}
	r.flushPresence()
	r.Broadcast("server", "end")
	assert.Equal(t, Message{Type: KindNotice, At: testAt, Text: "2 joins and leaves not shown (too many at once)"}, watcher.readAny())
	n := 0
	for m := watcher.readAny(); m.Type != KindChat; m = watcher.readAny() {
		require.True(t, m.Type == KindJoin || m.Type == KindLeave, "%+v", m)
		n++
	}
	assert.Equal(t, maxPresenceLog, n)
}
