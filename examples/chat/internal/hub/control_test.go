package hub

import (
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Per-client control: typing indicators that replace stale ones, the
// /kick command, and paced sends.

// While a client is held up, another starts, stops and starts typing
// again: the toggles cost no message of their own, the presence flush
// tells the held client the latest state, and a second flush before it
// was written replaces the first: the held client gets one indicator,
// after the chat said before the flush.
func TestTypingIndicatorsCarryTheLatestStateOnly(t *testing.T) {
	r := newRoom(t, Config{PresenceEvery: time.Hour}) // flushed by the test
	slow := r.dial(t)
	typer := r.dial(t)
	release := r.gate(t, slow.id)
	for _, on := range []bool{true, false, true} {
		typer.send(fmt.Sprintf(`{"typing":%v}`, on))
	}
	typer.send(`{"typing":true}`) // no change
	typer.say("after typing")
	assert.Equal(t, "after typing", typer.read().Text) // the server has read every frame before it
	releaseTyper := r.gate(t, typer.id)
	before := r.Stats()
	r.flushPresence()
	r.flushPresence() // each member's queued presence task is replaced
	assert.Equal(t, uint64(2), r.Stats().Replaced-before.Replaced, "presence tasks replaced")
	release()
	releaseTyper()

	assert.Equal(t, Message{Type: KindChat, Seq: 1, At: testAt, From: "guest-2", Text: "after typing"}, slow.read())
	assert.Equal(t, Message{Type: KindTyping, Name: "guest-2", Typing: true}, slow.read())
	typer.send(`{"typing":false}`)
	typer.say("stopped") // read in order after the toggle
	assert.Equal(t, "stopped", slow.read().Text)
	r.flushPresence()
	assert.Equal(t, Message{Type: KindTyping, Name: "guest-2"}, slow.read(), "stopped")
}

// A member kicks another from the page with "/kick name": the kicked one
// gets its kick message and the close, the room is told, and the command
// is answered to its sender. A command that cannot be carried out is
// refused with the reason; "/kickboxing" is chat.
func TestKickCommandKicksByName(t *testing.T) {
	r := newRoom(t, Config{})
	boss, victim := r.dial(t), r.dial(t)

	boss.sayRef("/kick guest-1", "k1")
	assert.Equal(t, Message{Type: KindRefused, Ref: "k1", Text: "you cannot kick yourself"}, boss.read())
	boss.sayRef("/kick nobody", "k2")
	assert.Equal(t, Message{Type: KindRefused, Ref: "k2", Text: "no member named nobody"}, boss.read())
	boss.sayRef("/kick ", "k3")
	assert.Equal(t, Message{Type: KindRefused, Ref: "k3", Text: "usage: /kick name"}, boss.read())
	boss.sayRef("/kickboxing", "c1")
	assert.Equal(t, Message{Type: KindChat, Seq: 1, At: testAt, From: "guest-1", Ref: "c1", Text: "/kickboxing"}, boss.read())
	assert.Equal(t, "/kickboxing", victim.read().Text)

	boss.sayRef("/kick guest-2", "k4")
	assert.Equal(t, Message{Type: KindKick, Text: "by guest-1"}, victim.read())
	_, err := victim.next()
	assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "close: %v", err)
	assert.ErrorContains(t, err, "kicked: by guest-1")
	assert.Equal(t, "kicked: by guest-1", <-r.left)
	assert.Equal(t, Message{Type: KindNotice, At: testAt, Text: "guest-2 was kicked by guest-1"}, boss.read())
	assert.Equal(t, Message{Type: KindDone, Ref: "k4"}, boss.read())
	assert.Equal(t, 1, r.Clients())
	boss.sayRef("/kick guest-2", "k5")
	assert.Equal(t, Message{Type: KindRefused, Ref: "k5", Text: "no member named guest-2"}, boss.read(), "gone")
}

// With SendRate, a client is sent at most that many messages a second:
// the rest wait in its queue and all arrive, in order, none dropped.
// Pacing guarantees a lower bound on the time they take, never an upper
// one, so that is what is checked.
func TestSendRatePacesWithoutDropping(t *testing.T) {
	const perSecond, n = 100, 11
	r := newRoom(t, Config{SendRate: perSecond, SendBurst: 1})
	p := r.dial(t) // its welcome took the one token
	start := time.Now()
	for i := range n {
		r.Broadcast("bob", fmt.Sprint(i))
	}
	for i := range n {
		require.Equal(t, fmt.Sprint(i), p.read().Text)
	}
	elapsed := time.Since(start)
	assert.GreaterOrEqual(t, elapsed, (n-1)*time.Second/perSecond, "%d messages at %d a second, burst 1", n, perSecond)
	st := r.Stats()
	assert.Zero(t, st.Skipped+st.Discarded+st.Replaced, "nothing dropped")
}
