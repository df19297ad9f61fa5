package hub

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/time/rate"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bound keeps a broken test from hanging: every read and dial gives up
// after it. It is a failure bound, never a synchronisation.
const bound = 60 * time.Second

// testNow is the room's clock in tests: every message is stamped with it.
var testNow = time.Date(2026, 11, 23, 21, 30, 0, 0, time.UTC)

// testAt is testNow as Message.At.
var testAt = testNow.UnixMilli()

// room is a Server listening on 127.0.0.1 (httptest binds loopback).
type room struct {
	*Server
	url      string        // ws://127.0.0.1:port/ws
	left     chan string   // why, for each connection handler about to return (Config.OnLeave)
	leftRoom chan ClientID // each client taken out of the room (Server.onLeftRoom)
}

// newRoom starts a server; it is shut down when the test ends.
func newRoom(t testing.TB, cfg Config) *room {
	t.Helper()
	// The limits a test does not set are off: each has tests of its own.
	if cfg.RateLimit == 0 {
		cfg.RateLimit = rate.Inf
	}
	if cfg.RoomRate == 0 {
		cfg.RoomRate = rate.Inf
	}
	if cfg.ReadRate == 0 {
		cfg.ReadRate = rate.Inf
	}
	if cfg.CommandRate == 0 {
		cfg.CommandRate = rate.Inf
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return testNow }
	}
	if cfg.Logger == nil { // what the room and the scheduler report goes with the test's output
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	r := &room{left: make(chan string, 100), leftRoom: make(chan ClientID, 100)}
	cfg.OnLeave = func(_ ClientID, why string) { r.left <- why }
	s, err := New(cfg)
	require.NoError(t, err)
	s.onLeftRoom = func(id ClientID) { r.leftRoom <- id }
	r.Server = s
	ts := httptest.NewServer(s.Handler())
	r.url = "ws" + strings.TrimPrefix(ts.URL, "http") + "/ws"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
		ts.Close()
	})
	return r
}

// peer is a test's WebSocket client.
type peer struct {
	t    testing.TB
	conn *websocket.Conn
	id   ClientID
}

// dial connects a client and reads its welcome.
func (r *room) dial(t testing.TB) *peer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, r.url, nil)
	require.NoError(t, err)
	conn.SetReadLimit(1 << 20)
	t.Cleanup(func() { _ = conn.CloseNow() })
	p := &peer{t: t, conn: conn}
	m := p.readAny()
	require.Equal(t, KindWelcome, m.Type, "first message")
	p.id = m.ID
	return p
}

// read returns the next message other than a join or leave (tests of
// presence use readAny); it fails the test if there is none.
func (p *peer) read() Message {
	p.t.Helper()
	for {
		m := p.readAny()
		if m.Type != KindJoin && m.Type != KindLeave {
			return m
		}
	}
}

// readAny returns the next message; it fails the test if there is none.
func (p *peer) readAny() Message {
	p.t.Helper()
	m, err := p.next()
	require.NoError(p.t, err)
	return m
}

// next returns the next message or the error that ended the connection.
func (p *peer) next() (Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	_, data, err := p.conn.Read(ctx)
	if err != nil {
		return Message{}, err
	}
	var m Message
	if err := json.Unmarshal(data, &m); err != nil {
		return Message{}, err
	}
	return m, nil
}

// say sends a chat message without a ref.
func (p *peer) say(text string) {
	p.t.Helper()
	p.send(`{"text":` + quote(text) + `}`)
}

// sayRef sends a chat message with the client's reference ref.
func (p *peer) sayRef(text, ref string) {
	p.t.Helper()
	p.send(`{"text":` + quote(text) + `,"ref":` + quote(ref) + `}`)
}

// send sends a raw text frame.
func (p *peer) send(frame string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	require.NoError(p.t, p.conn.Write(ctx, websocket.MessageText, []byte(frame)))
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// gate occupies id's session until release is called, so that messages
// sent meanwhile queue up behind it.
func (r *room) gate(t testing.TB, id ClientID) (release func()) {
	t.Helper()
	started, open := make(chan struct{}), make(chan struct{})
	_, err := r.sched.Go(context.Background(), id, func(context.Context) error {
		close(started)
		<-open
		return nil
	})
	require.NoError(t, err)
	<-started
	var once sync.Once
	return func() { once.Do(func() { close(open) }) }
}
