package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/seqsched/seqsched/examples/chat/internal/hub"
)

// What a hostile client, or a crowd of them from one address, cannot do to
// the room. Each test runs the program with its default flags on 127.0.0.1
// (a test changes the room's configuration only where it says so), with
// honest members that read everything they are sent.

// member is a test's client that reads everything it is sent, on a
// goroutine of its own, as an honest browser does.
type member struct {
	t    *testing.T
	conn *websocket.Conn
	name string
	msgs chan hub.Message // every message read, in order
	done chan struct{}    // closed when the connection ended
	err  error            // why, once done is closed
}

// join connects a member and reads its welcome.
func join(t *testing.T, url string) *member {
	t.Helper()
	conn, err := dialWS(url, "")
	require.NoError(t, err)
	m := &member{t: t, conn: conn, msgs: make(chan hub.Message, 10000), done: make(chan struct{})}
	go func() { // ends when the connection does: closed at the end of the test at the latest
		defer close(m.done)
		for {
			_, data, err := conn.Read(context.Background())
			if err != nil {
				m.err = err
				return
			}
			var msg hub.Message
			if err := json.Unmarshal(data, &msg); err != nil {
				m.err = err
				return
			}
			m.msgs <- msg
		}
	}()
	t.Cleanup(func() {
		_ = conn.CloseNow()
		<-m.done
	})
	w := m.next()
	require.Equal(t, hub.KindWelcome, w.Type)
	m.name = w.Name
	return m
}

// dialWS opens a WebSocket to the room at url, with host as its Host
// header if not empty.
func dialWS(url, host string) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"ws", &websocket.DialOptions{Host: host})
	if err != nil && resp != nil {
		err = fmt.Errorf("%w (HTTP %d)", err, resp.StatusCode)
	}
	if err == nil {
		conn.SetReadLimit(1 << 20)
	}
	return conn, err
}

// next returns the member's next message; the test fails if the
// connection ends first.
func (m *member) next() hub.Message {
	m.t.Helper()
	failed := time.NewTimer(bound)
	defer failed.Stop()
	select {
	case msg := <-m.msgs:
		return msg
	case <-failed.C:
		m.t.Fatalf("%s: no message within %v", m.name, bound)
		return hub.Message{}
	case <-m.done:
		select {
		case msg := <-m.msgs:
			return msg
		default:
		}
		m.t.Fatalf("%s: connection ended: %v", m.name, m.err)
		return hub.Message{}
	}
}

// until returns the member's next message that matches ok, skipping others.
func (m *member) until(ok func(hub.Message) bool) hub.Message {
	m.t.Helper()
	for {
		if msg := m.next(); ok(msg) {
			return msg
		}
	}
}

// chat returns a predicate for the chat message with text.
func chat(text string) func(hub.Message) bool {
	return func(m hub.Message) bool { return m.Type == hub.KindChat && m.Text == text }
}

// answer returns the answer to the member's message ref: the chat
// message from it that carries ref, a refusal, or done.
func (m *member) answer(ref string) hub.Message {
	m.t.Helper()
	return m.until(func(msg hub.Message) bool {
		return msg.Ref == ref && (msg.Type == hub.KindChat && msg.From == m.name || msg.Type == hub.KindRefused || msg.Type == hub.KindDone)
	})
}

func (m *member) sayRef(text, ref string) {
	m.t.Helper()
	frame, err := json.Marshal(map[string]string{"text": text, "ref": ref})
	require.NoError(m.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	require.NoError(m.t, m.conn.Write(ctx, websocket.MessageText, frame))
}

// stillHere checks that every member is still connected and reads what is
// said now.
func stillHere(t *testing.T, members ...*member) {
	t.Helper()
	members[0].sayRef("still here", "s")
	for _, m := range members {
		m.until(chat("still here"))
	}
}

// 400 connect/close cycles from one client: on main, each join and leave
// was a message in every member's queue, and the send pacing turned them
// into "too slow" evictions of members that read everything.
func TestChurnDoesNotDropReadingMembers(t *testing.T) {
	srv := startServer(t, "0", nil)
	honest := []*member{join(t, srv.url), join(t, srv.url), join(t, srv.url)}
	refused := 0
	for range 400 {
		conn, err := dialWS(srv.url, "")
		if err != nil { // the per-address cap, while closed ones are on their way out
			require.ErrorContains(t, err, "HTTP 503")
			refused++
			continue
		}
		_ = conn.CloseNow()
	}
	t.Logf("%d of 400 dials refused by the per-address cap", refused)
	stillHere(t, honest...)
}

// 35 clients, each within its own limit (10 messages at once), send at
// once: on main, 350 messages reached every member's queue at the send
// pace and evicted them. The room's own budget refuses what is beyond it
// (TestRoomBudgetRefusesChatBeyondIt counts it exactly), each refusal
// answered to its sender, and every reader gets every message said.
func TestCrowdWithinTheirLimitsDoesNotDropReadingMembers(t *testing.T) {
	srv := startServer(t, "0", nil)
	honest := []*member{join(t, srv.url), join(t, srv.url), join(t, srv.url)}
	crowd := make([]*member, 35)
	for i := range crowd {
		crowd[i] = join(t, srv.url)
	}
	var wg sync.WaitGroup
	for _, m := range crowd {
		wg.Go(func() {
			for i := range 10 {
				m.sayRef(fmt.Sprint(m.name, "/", i), fmt.Sprint("r", i))
			}
		})
	}
	wg.Wait()
	said, busy := 0, 0
	for _, m := range crowd { // a refusal is High: it may overtake chat
		answered := map[string]bool{}
		for len(answered) < 10 {
			a := m.until(func(msg hub.Message) bool {
				return msg.Type == hub.KindChat && msg.From == m.name || msg.Type == hub.KindRefused
			})
			require.False(t, answered[a.Ref], "%s: %s answered twice", m.name, a.Ref)
			answered[a.Ref] = true
			if a.Type == hub.KindChat {
				said++
			} else {
				require.Contains(t, a.Text, "the room is busy")
				busy++
			}
		}
	}
	assert.Equal(t, 350, said+busy)
	t.Logf("%d said, %d refused as busy", said, busy) // how many depends on how fast the machine is
	for _, m := range honest {                        // every message said reached every reader
		for i := range said {
			got := m.until(func(msg hub.Message) bool { return msg.Type == hub.KindChat })
			require.Equal(t, uint64(i+1), got.Seq, "%s", m.name)
		}
	}
	stillHere(t, append(honest, crowd...)...)
}

// One address may hold at most -max-conns-per-addr (64) connections: the
// next is refused before the upgrade, and the ones open go on.
func TestConnectionsFromOneAddressAreCapped(t *testing.T) {
	srv := startServer(t, "0", nil)
	members := make([]*member, 64)
	for i := range members {
		members[i] = join(t, srv.url)
	}
	_, err := dialWS(srv.url, "")
	require.ErrorContains(t, err, "HTTP 503")
	stillHere(t, members...)
}

// Only the room's first member, or a client that sent "/op" with the
// operator token, may kick; commands are rate limited.
func TestKickNeedsTheFirstMemberOrAnOperator(t *testing.T) {
	srv := startServer(t, "0", func(cfg *hub.Config) {
		cfg.OperatorToken = "op-secret" // -operator-token op-secret
		// Commands at the default pace (1 a second, 3 at once), but
		// without the refill, so that the count does not depend on
		// how fast the test runs.
		cfg.CommandRate, cfg.CommandBurst = rate.Every(1<<62), 3
	})
	first, second, third := join(t, srv.url), join(t, srv.url), join(t, srv.url)

	second.sayRef("/kick "+third.name, "k1")
	assert.Equal(t, "only the room's first member or an operator may kick", second.answer("k1").Text)
	second.sayRef("/op wrong", "o1")
	assert.Equal(t, "wrong operator token", second.answer("o1").Text)
	second.sayRef("/op op-secret", "o2")
	assert.Equal(t, hub.KindDone, second.answer("o2").Type)
	second.sayRef("/kick "+third.name, "k2")
	assert.True(t, strings.HasPrefix(second.answer("k2").Text, "too many commands: "), "the fourth command at once")

	first.sayRef("/kick "+third.name, "k3")
	assert.Equal(t, hub.KindDone, first.answer("k3").Type)
	<-third.done
	assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(third.err), "%v", third.err)
	assert.ErrorContains(t, third.err, "kicked: by "+first.name)
}

// A page of another site whose name resolves to 127.0.0.1 (DNS rebinding)
// sends that name as Host, and as Origin: both the page and the WebSocket
// refuse it. The names of the address the server listens on are served.
func TestOtherHostNamesAreRefused(t *testing.T) {
	srv := startServer(t, "0", nil)
	port := srv.url[strings.LastIndex(srv.url, ":")+1 : len(srv.url)-1]
	evil := "rebind.example:" + port

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: bound}
	get := func(url, host string) int {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusMisdirectedRequest, get(srv.url, evil), "the page")
	assert.Equal(t, http.StatusMisdirectedRequest, get(srv.metrics, evil), "the metrics")
	_, err := dialWS(srv.url, evil)
	assert.ErrorContains(t, err, "HTTP 421", "the WebSocket")

	assert.Equal(t, http.StatusOK, get(srv.url, "localhost:"+port))
	assert.Equal(t, http.StatusOK, get(srv.url, ""))
	conn, err := dialWS(srv.url, "localhost:"+port)
	require.NoError(t, err)
	_ = conn.CloseNow()
}
