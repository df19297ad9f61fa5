package hub

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/time/rate"

	"github.com/seqsched/seqsched"
)

// 50 clients each send 4 messages at once (so 50 read loops broadcast
// concurrently): every client receives all 200, every sender's in the
// order it sent them, and all clients in one and the same order.
func TestEveryClientReceivesEveryMessageInOneOrder(t *testing.T) {
	const clients, each = 50, 4
	// Room for all 200 in every queue: the room's budget (a member half
	// a queue behind makes it refuse chat) is TestRoomWaitsForMembersBehind's.
	r := newRoom(t, Config{MaxQueue: 2 * clients * each})
	peers := make([]*peer, clients)
	for i := range peers {
		peers[i] = r.dial(t)
	}

	got := make([][]string, clients)
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			for range clients * each {
				m := p.read()
				if !assert.Equal(t, KindChat, m.Type) {
					return
				}
				got[i] = append(got[i], fmt.Sprintf("%d %s %s", m.Seq, m.From, m.Text))
			}
		})
	}
	var senders sync.WaitGroup
	for i, p := range peers {
		senders.Go(func() {
			for k := range each {
				p.say(fmt.Sprintf("c%d-m%d", i, k))
			}
		})
	}
	senders.Wait()
	wg.Wait()

	for i := range got {
		require.Len(t, got[i], clients*each, "client %d", i)
		assert.Equal(t, got[0], got[i], "client %d saw another order than client 0", i)
	}
	next := map[string]int{} // sender -> next k expected
	for n, line := range got[0] {
		var seq, k, c int
		var from string
		_, err := fmt.Sscanf(line, "%d %s c%d-m%d", &seq, &from, &c, &k)
		require.NoError(t, err, line)
		assert.Equal(t, n+1, seq, "sequence numbers have no gaps")
		assert.Equal(t, next[from], k, "%s's messages out of order", from)
		next[from] = k + 1
	}
	assert.Len(t, next, clients)
}

// A notice sent after a backlog of chat reaches the client first.
func TestNoticeOvertakesQueuedChat(t *testing.T) {
	r := newRoom(t, Config{})
	p := r.dial(t)
	release := r.gate(t, p.id)
	for i := range 10 {
		r.Broadcast("bob", fmt.Sprint(i))
	}
	r.Notice("maintenance at noon")
	release()

	assert.Equal(t, Message{Type: KindNotice, At: testAt, Text: "maintenance at noon"}, p.read())
	for i := range 10 {
		assert.Equal(t, Message{Type: KindChat, Seq: uint64(i + 1), At: testAt, From: "bob", Text: fmt.Sprint(i)}, p.read())
	}
}

// A kick overtakes queued chat, and the connection closes with the reason.
func TestKickOvertakesQueuedChatAndCloses(t *testing.T) {
	r := newRoom(t, Config{})
	p, other := r.dial(t), r.dial(t)
	release := r.gate(t, p.id)
	for i := range 5 {
		r.Broadcast("bob", fmt.Sprint(i))
	}
	require.NoError(t, r.Kick(p.id, "spamming"))
	release()

	assert.Equal(t, Message{Type: KindKick, Text: "spamming"}, p.read())
	_, err := p.next()
	assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "close: %v", err)
	assert.ErrorContains(t, err, "kicked: spamming")
	assert.Equal(t, "kicked: spamming", <-r.left)

	// The others go on.
	for i := range 5 {
		assert.Equal(t, fmt.Sprint(i), other.read().Text)
	}
	r.Broadcast("bob", "still here")
	assert.Equal(t, "still here", other.read().Text)
	assert.ErrorIs(t, r.Kick(p.id, "again"), ErrNoClient)
}

// A kicked client gets its kick message right after the message being
// written to it, and nothing after it: the chat queued for it before the
// kick (which the High kick overtook) and whatever is queued on its session
// after the kick are discarded unrun, every one of them counted; then its
// connection closes with the reason. A High notice queued before the kick
// still comes first.
func TestKickedClientGetsNothingQueuedAfterTheKick(t *testing.T) {
	r := newRoom(t, Config{})
	p, other := r.dial(t), r.dial(t)
	assert.Equal(t, Message{Type: KindJoin, At: testAt, Name: "guest-2", Members: 2}, p.readAny())
	r.mu.Lock()
	c := r.clients[p.id]
	r.mu.Unlock()
	release := r.gate(t, p.id) // the message being written
	before := r.sched.Stats()
	for i := range 5 {
		r.Broadcast("bob", fmt.Sprint(i))
	}
	r.Notice("before the kick")
	require.NoError(t, r.Kick(p.id, "spamming"))
	// Queued on its session after the kick, in both lanes: each would
	// write to the client if it ran.
	var ran atomic.Int32
	late := func(ctx context.Context) error {
		ran.Add(1)
		return c.write(ctx, encode(Message{Type: KindChat, Text: "late"}))
	}
	lateHigh, err := r.sched.Go(context.Background(), p.id, late, seqsched.High)
	require.NoError(t, err)
	lateNormal, err := r.sched.Go(context.Background(), p.id, late)
	require.NoError(t, err)
	release()

	assert.Equal(t, Message{Type: KindNotice, At: testAt, Text: "before the kick"}, p.readAny())
	assert.Equal(t, Message{Type: KindKick, Text: "spamming"}, p.readAny())
	m, err := p.next()
	assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "after the kick: %+v, %v", m, err)
	assert.ErrorContains(t, err, "kicked: spamming")
	assert.Equal(t, "kicked: spamming", <-r.left)

	for _, f := range []*seqsched.Future[struct{}]{lateHigh, lateNormal} {
		_, err := f.Await(context.Background())
		assert.ErrorIs(t, err, seqsched.ErrDiscarded)
	}
	assert.Zero(t, ran.Load(), "a task queued after the kick ran")
	after := r.sched.Stats()
	assert.Equal(t, uint64(5+1), after.Normal.Outcomes.Discarded-before.Normal.Outcomes.Discarded, "5 chats, 1 late")
	assert.Equal(t, uint64(1), after.High.Outcomes.Discarded-before.High.Outcomes.Discarded, "1 late")
	_, err = r.sched.Go(context.Background(), p.id, late)
	require.NoError(t, err, "the key is fresh again")

	// The other client got everything (its notice may overtake its chat).
	var got []string
	for range 5 + 1 {
		got = append(got, other.read().Text)
	}
	assert.Equal(t, []string{"0", "1", "2", "3", "4"}, slices.DeleteFunc(slices.Clone(got), func(s string) bool { return s == "before the kick" }))
	assert.Contains(t, got, "before the kick")
}

// A client whose High queue is full as well cannot be sent a kick message:
// it is kicked at once, the message being written cut short (its ctx
// canceled; seqsched.Cause says ErrDiscarded), nothing queued sent,
// and its connection closed with the reason.
func TestKickWithFullQueuesClosesAtOnce(t *testing.T) {
	const maxQueue = 2
	r := newRoom(t, Config{MaxQueue: maxQueue})
	p := r.dial(t)
	before := r.sched.Stats()
	started, cause := make(chan struct{}), make(chan error, 1)
	_, err := r.sched.Go(context.Background(), p.id, func(ctx context.Context) error {
		close(started)
		<-ctx.Done() // a write that never ends on its own
		cause <- seqsched.Cause(ctx)
		return ctx.Err()
	})
	require.NoError(t, err)
	<-started
	for i := range maxQueue {
		r.Broadcast("bob", fmt.Sprint(i))
		r.Notice(fmt.Sprint(i))
	}
	require.NoError(t, r.Kick(p.id, "spamming"))

	assert.ErrorIs(t, <-cause, seqsched.ErrDiscarded)
	m, err := p.next()
	assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "got %+v, %v", m, err)
	assert.ErrorContains(t, err, "kicked: spamming")
	assert.Equal(t, "kicked: spamming", <-r.left)
	after := r.sched.Stats()
	assert.Equal(t, uint64(maxQueue), after.Normal.Outcomes.Discarded-before.Normal.Outcomes.Discarded)
	assert.Equal(t, uint64(maxQueue), after.High.Outcomes.Discarded-before.High.Outcomes.Discarded)
}

// Messages still queued for a client when it disconnects are dropped
// unsent: they were posted with the connection's ctx, which ends with it.
func TestDisconnectDropsQueuedMessagesUnsent(t *testing.T) {
	r := newRoom(t, Config{})
	p := r.dial(t)
	release := r.gate(t, p.id)
	before := r.sched.Stats() // the welcome has been written
	for i := range 5 {
		r.Broadcast("bob", fmt.Sprint(i))
	}
	require.NoError(t, p.conn.Close(websocket.StatusNormalClosure, "bye"))
	assert.Equal(t, p.id, <-r.leftRoom) // its ctx has ended
	release()
	assert.Equal(t, "disconnected: closed by client (1000 bye)", <-r.left)
	after := r.sched.Stats()
	assert.Equal(t, uint64(5), after.Normal.Outcomes.Skipped-before.Normal.Outcomes.Skipped)
	assert.Equal(t, before.Normal.Outcomes.Succeeded+1, after.Normal.Outcomes.Succeeded, "only the gate ran")
	assert.Equal(t, 0, after.Sessions)
}

// Beyond its rate limit a client's message is not broadcast: its sender
// gets a refusal naming the message (its ref) and why, so that nothing it
// sent is lost without a word.
func TestRateLimitRefusesWithRef(t *testing.T) {
	r := newRoom(t, Config{RateLimit: rate.Every(time.Hour), Burst: 2})
	p, watcher := r.dial(t), r.dial(t)
	for i := range 3 {
		p.sayRef(fmt.Sprint(i), fmt.Sprintf("r%d", i))
	}
	var got []Message
	for range 3 {
		got = append(got, p.read())
	}
	// The refusal is High: it may overtake the chat still queued.
	assert.ElementsMatch(t, []Message{
		{Type: KindChat, Seq: 1, At: testAt, From: "guest-1", Ref: "r0", Text: "0"},
		{Type: KindChat, Seq: 2, At: testAt, From: "guest-1", Ref: "r1", Text: "1"},
		{Type: KindRefused, Ref: "r2", Text: "too fast: at most 0.0002777777777777778 messages a second (2 at once); try again"},
	}, got)

	assert.Equal(t, "0", watcher.read().Text)
	assert.Equal(t, "1", watcher.read().Text)
	r.Broadcast("server", "end")
	assert.Equal(t, "end", watcher.read().Text, "the third message must not have been broadcast")
}

// An empty, an overlong or an unreadable message is answered too: a
// refusal with its ref, or a warning when there is no ref to name.
func TestBadMessagesAreAnswered(t *testing.T) {
	r := newRoom(t, Config{})
	p := r.dial(t)
	p.sayRef("", "e")
	assert.Equal(t, Message{Type: KindRefused, Ref: "e", Text: "empty message"}, p.read())
	p.sayRef(strings.Repeat("é", MaxText+1), "long")
	assert.Equal(t, Message{Type: KindRefused, Ref: "long", Text: "too long: 1001 characters, at most 1000"}, p.read())
	p.sayRef(strings.Repeat("é", MaxText), "just")
	assert.Equal(t, "just", p.read().Ref, "MaxText characters are delivered")
	p.send(`not json`)
	assert.Equal(t, KindWarn, p.read().Type)
	p.sayRef("x", strings.Repeat("r", maxRef+1))
	assert.Equal(t, Message{Type: KindWarn, Text: `not understood: send {"text": "...", "ref": "..."} (ref at most 64 bytes)`}, p.read())
}

// A client is welcomed with its name and the member count; the others are
// told who joined and who left, with the count, in the room's one order.
func TestJoinAndLeaveAreAnnouncedWithMemberCount(t *testing.T) {
	r := newRoom(t, Config{})
	first := r.dial(t) // dial checked its welcome
	second, err := dialRaw(r.url)
	require.NoError(t, err)
	p2 := &peer{t: t, conn: second}
	assert.Equal(t, Message{Type: KindWelcome, ID: 2, Name: "guest-2", Members: 2}, p2.readAny())
	assert.Equal(t, Message{Type: KindJoin, At: testAt, Name: "guest-2", Members: 2}, first.readAny())

	r.Broadcast("bob", "hi")
	assert.Equal(t, "hi", p2.readAny().Text, "a message said after the join reaches the joiner")
	assert.Equal(t, "hi", first.readAny().Text)

	require.NoError(t, second.Close(websocket.StatusNormalClosure, "bye"))
	assert.Equal(t, Message{Type: KindLeave, At: testAt, Name: "guest-2", Members: 1}, first.readAny())
	assert.Equal(t, "disconnected: closed by client (1000 bye)", <-r.left)

	// A kicked client's leave is announced too; a shutdown announces none.
	third := r.dial(t)
	assert.Equal(t, Message{Type: KindJoin, At: testAt, Name: "guest-3", Members: 2}, first.readAny())
	require.NoError(t, r.Kick(third.id, "spam"))
	assert.Equal(t, Message{Type: KindLeave, At: testAt, Name: "guest-3", Members: 1}, first.readAny())
	assert.Equal(t, Message{Type: KindKick, Text: "spam"}, third.read())
	_, err = third.next()
	assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "close: %v", err)
	shut := make(chan error, 1)
	go func() { shut <- r.Shutdown(context.Background()) }() // waited for below
	assert.Equal(t, Message{Type: KindNotice, At: testAt, Text: "server shutting down"}, first.readAny())
	_, err = first.next() // answers the close, so that Shutdown need not wait for it
	assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "close: %v", err)
	require.NoError(t, <-shut)
}

// slowReasonRE matches the close reason of a client dropped with 8
// messages waiting.
var slowReasonRE = regexp.MustCompile(`too slow: not reading \(a write blocked for [0-9.]+m?s, 8 messages waiting\)`)

// A client that stops reading fills its queue and is disconnected with a
// clear close reason, while the others go on without delay.
func TestSlowClientIsDisconnectedWhileOthersContinue(t *testing.T) {
	const maxQueue = 8
	r := newRoom(t, Config{MaxQueue: maxQueue, WriteTimeout: bound})
	slow := r.dial(t) // never reads until it is taken out of the room
	fast := []*peer{r.dial(t), r.dial(t), r.dial(t)}

	// Broadcast big messages until the slow client's socket buffers and
	// then its queue are full. The fast clients read each before the
	// next is sent, so their queues stay short.
	payload := strings.Repeat("x", 64<<10)
	var sent uint64
	for done := false; !done; {
		sent = r.Broadcast("bob", payload)
		for _, p := range fast {
			require.Equal(t, sent, p.read().Seq)
		}
		select {
		case id := <-r.leftRoom:
			require.Equal(t, slow.id, id)
			done = true
		default:
			require.Less(t, sent, uint64(10000), "the slow client was never disconnected")
		}
	}

	// The slow client now reads what reached it: an unbroken prefix of
	// the room's messages, then the close frame with the reason.
	var last uint64
	for {
		m, err := slow.next()
		if err != nil {
			assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "close: %v", err)
			assert.Regexp(t, slowReasonRE, err.Error())
			break
		}
		if m.Type == KindJoin { // the fast clients joined after it
			continue
		}
		require.Equal(t, last+1, m.Seq)
		last = m.Seq
	}
	assert.Less(t, last, sent, "it cannot have received everything")
	assert.Regexp(t, slowReasonRE, <-r.left)

	r.Broadcast("bob", "after")
	for _, p := range fast {
		assert.Equal(t, "after", p.read().Text)
	}
	assert.Equal(t, 3, r.Clients())
}

// Shutdown delivers everything queued to every client, then closes each
// connection with "going away"; a notice tells them why.
func TestShutdownDrainsEverySession(t *testing.T) {
	const clients, msgs = 5, 100
	r := newRoom(t, Config{})
	peers := make([]*peer, clients)
	for i := range peers {
		peers[i] = r.dial(t)
	}
	for i := range msgs {
		r.Broadcast("bob", fmt.Sprint(i))
	}
	shut := make(chan error, 1)
	go func() { shut <- r.Shutdown(context.Background()) }() // waited for below

	for i, p := range peers {
		var chats []string
		notices := 0
		for {
			m, err := p.next()
			if err != nil {
				assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "client %d: %v", i, err)
				break
			}
			switch m.Type {
			case KindChat:
				chats = append(chats, m.Text)
			case KindNotice:
				assert.Equal(t, "server shutting down", m.Text)
				notices++
			}
		}
		assert.Len(t, chats, msgs, "client %d", i)
		for k, c := range chats {
			assert.Equal(t, fmt.Sprint(k), c, "client %d", i)
		}
		assert.Equal(t, 1, notices, "client %d", i)
	}
	require.NoError(t, <-shut)
	assert.Equal(t, 0, r.sched.Stats().Sessions)

	// Refused afterwards: the upgrade succeeds, then it closes at once.
	p, err := dialRaw(r.url)
	require.NoError(t, err)
	defer p.CloseNow()
	_, _, err = p.Read(context.Background())
	assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err))
}

// When clients leave, their sessions are drained and forgotten, and no
// goroutine is left behind.
func TestDisconnectRemovesSessionAndGoroutines(t *testing.T) {
	r := newRoom(t, Config{})
	baseline := goleak.IgnoreCurrent()
	peers := []*peer{r.dial(t), r.dial(t), r.dial(t)}
	peers[0].say("hello")
	for _, p := range peers {
		assert.Equal(t, "hello", p.read().Text)
	}
	// Queue messages that the leaving clients will never read.
	for i := range 20 {
		r.Broadcast("bob", fmt.Sprint(i))
	}
	for _, p := range peers {
		require.NoError(t, p.conn.Close(websocket.StatusNormalClosure, "bye"))
	}
	for range peers {
		assert.Equal(t, "disconnected: closed by client (1000 bye)", <-r.left)
	}
	assert.Equal(t, 0, r.Clients())
	assert.Equal(t, 0, r.sched.Stats().Sessions)
	goleak.VerifyNone(t, baseline)
}

func dialRaw(url string) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, errors.Join(errors.New("dial"), err)
	}
	return c, nil
}
