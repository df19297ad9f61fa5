// Package hub is a chat room over WebSockets in which every connection is a
// seqsched session. Everything the server sends to a client is a task on
// that client's session, so each client receives messages one at a time and
// in the order they were sent, however many goroutines broadcast at once;
// control messages (notices, rate-limit warnings, kicks) use the High lane
// and reach the client before chat still queued for it. A client too slow to
// keep up fills its queue (WithMaxQueue) and is disconnected with a clear
// close reason, without slowing anyone else.
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
	Logger    *slog.Logger // nil discards
	// Now stamps the room's messages (time.Now); tests set a fixed clock.
	Now func() time.Time
	// OnLeave, if set, is called when a client's connection handler is
	// about to return, with the reason it left.
	OnLeave func(id ClientID, reason string)
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
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
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
	// message for every client (Submit never blocks), so that all clients
	// see the room's messages in one and the same order.
	mu      sync.Mutex
	clients map[ClientID]*client
	nextID  ClientID
	seq     uint64
	closed  bool

	handlers sync.WaitGroup // connection handlers running

	onEvict func(ClientID) // tests: called when a client is taken out of the room
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	sched, err := seqsched.New[ClientID](seqsched.WithMaxQueue(cfg.MaxQueue), seqsched.WithLogger(cfg.Logger))
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, sched: sched, clients: make(map[ClientID]*client)}, nil
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
	s.evictSlow(slow)
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

// evictSlow disconnects clients whose queue was full. s.mu is not held.
func (s *Server) evictSlow(slow []*client) {
	for _, c := range slow {
		s.cfg.Logger.Info("disconnecting slow client", "client", c.id, "queue", s.cfg.MaxQueue)
		c.evict(websocket.StatusPolicyViolation,
			fmt.Sprintf("%s (%d messages waiting)", reasonSlow, s.cfg.MaxQueue), false)
	}
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

// ErrNoClient is returned by Kick for an unknown client.
var ErrNoClient = errors.New("hub: no such client")

// Kick disconnects client id: it gets a kick message ahead of the chat
// queued for it, then the connection closes with reason.
func (s *Server) Kick(id ClientID, reason string) error {
	s.mu.Lock()
	c := s.clients[id]
	s.mu.Unlock()
	if c == nil {
		return ErrNoClient
	}
	_, err := s.sched.Go(context.Background(), id, func(ctx context.Context) error {
		werr := c.write(ctx, encode(Message{Type: KindKick, Text: reason}))
		c.evict(websocket.StatusPolicyViolation, "kicked: "+reason, false)
		return werr
	}, seqsched.High)
	return err
}

// Clients returns how many clients are connected.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}

// Shutdown disconnects every client gracefully: each gets a notice, then
// everything already queued for it, then a close frame (going away). New
// connections are refused, and no leave is announced from now on. It returns when every connection handler has
// returned; if ctx ends first, it drops the connections without further
// ado, waits for the handlers, and returns ctx's error.
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
		c.evict(websocket.StatusGoingAway, reasonShutdown, true)
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
			_ = c.conn.CloseNow()
		}
		<-done
	}
	if serr := s.sched.Shutdown(ctx); err == nil {
		err = serr
	}
	return err
}
