// Package hub is a chat room over WebSockets in which every connection is a
// seqsched session. Everything the server sends to a client is a task on
// that client's session, so each client receives messages one at a time and
// in the order they were sent, however many goroutines broadcast at once;
// control messages (notices, rate-limit warnings, kicks) use the High lane
// and reach the client before chat still queued for it. Typing indicators
// are sent with seqsched.Replace, so that a client that falls behind gets
// each member's latest state only; Config.SendRate paces what each client
// is sent (seqsched.WithRate) without dropping any of it.
//
// Each connection holds a handle on its session (Scheduler.Open) and posts
// its messages with Session.Post, passing the connection's ctx: once the
// client is gone, what is still queued for it is dropped unsent. A kicked
// client gets its kick message right after the message being written, and
// nothing after it: the kick's task discards the rest of the queue
// (Session.Discard); a member kicks another from the page with the chat
// command "/kick name". A client too slow to keep up fills its queue
// (WithMaxQueue) and is dropped the same way, with a clear close reason,
// without slowing anyone else.
package hub

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/seqsched/seqsched"
)

// ClientID identifies a connection; it is also its seqsched session key.
type ClientID uint64

// Config configures a Server. Zero fields take the defaults shown.
type Config struct {
	MaxQueue     int           // messages that may wait for one client before it is disconnected (256)
	WriteTimeout time.Duration // for one message to one client (10s)
	DrainTimeout time.Duration // to flush a leaving client's queue (2s)
	// RateLimit and Burst bound the chat messages one client may send;
	// beyond them it gets a warning instead of a broadcast. A zero
	// RateLimit means 5 per second with a burst of 10; rate.Inf, none.
	RateLimit rate.Limit
	Burst     int
	// SendRate and SendBurst pace what the room sends each client: at
	// most SendRate messages a second, SendBurst at once (seqsched.WithRate).
	// The rest wait in the client's queue, in order, and none is dropped
	// for it; a client whose queue fills (MaxQueue) is still disconnected
	// as too slow. A zero SendRate (or rate.Inf) means no pacing; a
	// SendBurst below 1 means 1. A paced client that leaves has its queue
	// dropped at the same pace (a token per message).
	SendRate  rate.Limit
	SendBurst int
	// Logger receives the room's log and the scheduler's: a client's join
	// and leave (Info), a message not delivered (Debug; Error if its task
	// panicked). Nil means slog.Default().
	Logger *slog.Logger
	// Now stamps the room's messages (time.Now); tests set a fixed clock.
	Now func() time.Time
	// OnLeave, if set, is called when a client's connection handler is
	// about to return, with the reason it left.
	OnLeave func(id ClientID, reason string)
	// BeforeWrite, if set, is called on the client's session before each
	// message is written to it; tests use it to hold a client's messages
	// back while more queue up.
	BeforeWrite func(id ClientID, data []byte)
}

func (c Config) withDefaults() Config {
	if c.MaxQueue == 0 {
		c.MaxQueue = 256
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 2 * time.Second
	}
	if c.RateLimit == 0 {
		c.RateLimit, c.Burst = 5, 10
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.SendBurst < 1 {
		c.SendBurst = 1
	}
	return c
}

// Close reasons sent to clients.
const (
	reasonSlow     = "too slow: outbound queue full"
	reasonShutdown = "server shutting down"
)

// Server is the chat room. Serve it with Handler; stop it with Shutdown.
// Its methods are safe for concurrent use.
type Server struct {
	cfg   Config
	sched *seqsched.Scheduler[ClientID]

	// mu guards the fields below. Broadcast holds it while it queues a
	// message for every client (Post never blocks), so that all clients
	// see the room's messages in one and the same order.
	mu      sync.Mutex
	clients map[ClientID]*client
	nextID  ClientID
	seq     uint64
	closed  bool

	handlers sync.WaitGroup // connection handlers running

	onLeftRoom func(ClientID) // tests: called when a client has been taken out of the room
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, clients: make(map[ClientID]*client)}
	opts := []seqsched.Option{
		seqsched.WithWaitHistogram(), seqsched.WithRunHistogram(), // for /metrics
		seqsched.WithMaxQueue(cfg.MaxQueue),
		seqsched.WithLogger(cfg.Logger),
		seqsched.WithErrorHandler(s.undelivered),
	}
	if cfg.SendRate != 0 && cfg.SendRate != rate.Inf {
		opts = append(opts, seqsched.WithRate(func(ClientID) (float64, int) {
			return float64(cfg.SendRate), cfg.SendBurst
		}))
	}
	sched, err := seqsched.New[ClientID](opts...)
	if err != nil {
		return nil, err
	}
	s.sched = sched
	return s, nil
}

// Stats returns the room's scheduler's figures: what /metrics exports.
func (s *Server) Stats() seqsched.Stats { return s.sched.Stats() }

// undelivered logs a message that did not reach client id (a failed Post).
// A write fails when the connection broke, and a message is dropped unsent
// when its client left, was kicked or was too slow, or (a typing
// indicator) replaced by a newer one: the client's handler sees and logs
// that once, so each message is only worth a Debug line. A panic is a
// bug, and an Error.
func (s *Server) undelivered(_ context.Context, id ClientID, err error) {
	level := slog.LevelDebug
	var perr *seqsched.PanicError
	if errors.As(err, &perr) || errors.Is(err, seqsched.ErrGoexit) {
		level = slog.LevelError
	}
	s.cfg.Logger.Log(context.Background(), level, "message not delivered", "client", id, "err", err)
}

//go:embed static
var static embed.FS

// Handler serves the chat page at / and the WebSocket at /ws.
func (s *Server) Handler() http.Handler {
	page, err := fs.Sub(static, "static")
	if err != nil {
		panic("hub: embedded page missing: " + err.Error())
	}
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(page))
	mux.HandleFunc("GET /ws", s.serveWS)
	return mux
}

// Broadcast sends a chat message from name to every client, and returns its
// sequence number. Every client receives the room's messages in the same
// order. A client whose queue is full is disconnected.
func (s *Server) Broadcast(name, text string) uint64 {
	return s.say(name, text, "")
}

// say broadcasts a chat message carrying the sender's reference ref.
func (s *Server) say(name, text, ref string) uint64 {
	s.mu.Lock()
	s.seq++
	seq := s.seq
	slow := s.broadcastLocked(Message{Type: KindChat, Seq: seq, From: name, Ref: ref, Text: text}, nil)
	s.mu.Unlock()
	s.dropSlow(slow)
	return seq
}

// broadcastLocked queues m for every client but except, on the Normal lane,
// and returns the clients whose queue was full. s.mu is held: the room's
// messages reach every client in the order they were queued under it.
func (s *Server) broadcastLocked(m Message, except *client) (slow []*client) {
	m.At = s.cfg.Now().UnixMilli()
	data := encode(m)
	for _, c := range s.clients {
		if c == except {
			continue
		}
		if err := c.send(data, seqsched.Normal); errors.Is(err, seqsched.ErrQueueFull) {
			slow = append(slow, c)
		}
	}
	return slow
}

// dropSlow disconnects clients whose queue was full, without sending them
// what is queued. s.mu is not held.
func (s *Server) dropSlow(slow []*client) {
	for _, c := range slow {
		if !s.leave(c) {
			continue // already on its way out
		}
		s.cfg.Logger.Info("disconnecting slow client", "client", c.id, "queue", s.cfg.MaxQueue)
		c.drop(nil, websocket.StatusPolicyViolation, fmt.Sprintf("%s (%d messages waiting)", reasonSlow, s.cfg.MaxQueue))
	}
}

// leave takes c out of the room, so that nothing more is broadcast to it,
// and tells the others (unless the room is shutting down). It reports
// whether this call took it out: only the first does.
func (s *Server) leave(c *client) bool {
	s.mu.Lock()
	if s.clients[c.id] != c {
		s.mu.Unlock()
		return false
	}
	delete(s.clients, c.id)
	var slow []*client
	if !s.closed {
		slow = s.broadcastLocked(Message{Type: KindLeave, Name: c.name, Members: len(s.clients)}, nil)
	}
	s.mu.Unlock()
	if s.onLeftRoom != nil {
		s.onLeftRoom(c.id)
	}
	s.dropSlow(slow)
	return true
}

// Notice sends a server notice to every client, ahead of the chat queued
// for it.
func (s *Server) Notice(text string) {
	data := encode(Message{Type: KindNotice, At: s.cfg.Now().UnixMilli(), Text: text})
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.clients {
		_ = c.send(data, seqsched.High) // a full High lane: that client is being disconnected anyway
	}
}

// typing tells the others that c started (on) or stopped typing, if that
// changes what they were last told. The indicator is tagged with
// seqsched.Replace: while one of c's waits unsent in a client's queue, the
// newer one takes its place there, so a client that falls behind gets c's
// latest state, once, where the first stale one would have come, and never
// a backlog of them.
func (s *Server) typing(c *client, on bool) {
	s.mu.Lock()
	if s.clients[c.id] != c || c.typing == on {
		s.mu.Unlock()
		return
	}
	c.typing = on
	data := encode(Message{Type: KindTyping, Name: c.name, Typing: on})
	var slow []*client
	for _, o := range s.clients {
		if o == c {
			continue
		}
		if err := o.send(data, seqsched.Normal, seqsched.Replace(c.typingTag)); errors.Is(err, seqsched.ErrQueueFull) {
			slow = append(slow, o)
		}
	}
	s.mu.Unlock()
	s.dropSlow(slow)
}

// kickBy carries out by's "/kick name": the member called name is kicked
// (see Kick) with the reason "by <by's name>", the room is told, and by
// gets done for its command ref; or by gets a refusal saying why not. Any
// member may kick another: this is a demo, where a real room would check a
// role.
func (s *Server) kickBy(by *client, name, ref string) {
	s.mu.Lock()
	var target *client
	for _, c := range s.clients {
		if c.name == name {
			target = c
		}
	}
	s.mu.Unlock()
	switch {
	case name == "":
		by.refuse(ref, "usage: /kick name")
		return
	case target == by:
		by.refuse(ref, "you cannot kick yourself")
		return
	case target == nil || s.Kick(target.id, "by "+by.name) != nil: // gone meanwhile
		by.refuse(ref, "no member named "+name)
		return
	}
	s.Notice(name + " was kicked by " + by.name)
	_ = by.send(encode(Message{Type: KindDone, Ref: ref}), seqsched.High)
}

// ErrNoClient is returned by Kick for an unknown client.
var ErrNoClient = errors.New("hub: no such client")

// Kick disconnects client id: it leaves the room at once, gets a kick
// message right after the message being written to it (if any), and
// nothing after it: the chat still queued for it is dropped. Then its
// connection closes with reason. Kick does not wait for any of this.
func (s *Server) Kick(id ClientID, reason string) error {
	s.mu.Lock()
	c := s.clients[id]
	s.mu.Unlock()
	if c == nil || !s.leave(c) {
		return ErrNoClient
	}
	c.drop(encode(Message{Type: KindKick, Text: reason}), websocket.StatusPolicyViolation, "kicked: "+reason)
	return nil
}

// Clients returns how many clients are connected.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}

// Shutdown disconnects every client gracefully: each gets a notice, then
// everything already queued for it, then a close frame (going away). New
// connections are refused, and no leave is announced from now on. It
// returns when every connection handler has returned; if ctx ends first,
// it drops the connections without further ado, waits for the handlers,
// and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	clients := make([]*client, 0, len(s.clients))
	for _, c := range s.clients {
		clients = append(clients, c)
	}
	s.mu.Unlock()
	notice := encode(Message{Type: KindNotice, At: s.cfg.Now().UnixMilli(), Text: reasonShutdown})
	for _, c := range clients {
		_ = c.send(notice, seqsched.High)
		s.leave(c) // the room is closed: no leave is announced
		c.end(websocket.StatusGoingAway, reasonShutdown, true)
	}

	done := make(chan struct{})
	go func() { // ends when the handlers do: below, we wait for it either way
		s.handlers.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		for _, c := range clients {
			c.cancel() // what is queued is dropped, and a write in progress stops
			_ = c.conn.CloseNow()
		}
		<-done
	}
	if serr := s.sched.Shutdown(ctx); err == nil {
		err = serr
	}
	return err
}
