// Package hub is a chat room over WebSockets in which every connection is a
// seqsched session. Everything the server sends to a client is a task on
// that client's session, so each client receives messages one at a time and
// in the order they were sent, however many goroutines broadcast at once;
// control messages (notices, rate-limit warnings, kicks) use the High lane
// and reach the client before chat still queued for it. Joins, leaves and
// typing go out as one presence task per member at most every
// Config.PresenceEvery, tagged with seqsched.Replace, so that no client's
// coming and going fills anyone's queue (presence.go); Config.SendRate
// paces what each client is sent (seqsched.WithRate) without dropping any
// of it, and the room accepts no more chat than its members can be sent.
//
// Each connection holds a handle on its session (Scheduler.Open) and posts
// its messages with Session.Post, passing the connection's ctx: once the
// client is gone, what is still queued for it is dropped unsent. A kicked
// client gets its kick message right after the message being written, and
// nothing after it: the kick's task discards the rest of the queue
// (Session.Discard); the room's first member, or an operator, kicks
// another from the page with the chat command "/kick name". A client that
// stops reading fills its queue (WithMaxQueue) and is dropped the same way,
// with a close reason that says why, without slowing anyone else. What one
// client may hold of the server (connections, time, rates) is bounded
// (limits.go).
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

// Close reasons sent to clients.
const (
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
	mu       sync.Mutex
	clients  map[ClientID]*client
	nextID   ClientID
	seq      uint64
	closed   bool
	conns    int            // connections admitted, in the room or on their way
	addrs    map[string]int // connections admitted, by IP address
	presence presenceLog
	typers   map[ClientID]*client // members typing, at most maxTypers
	flushDue bool                 // a presence flush is on its way
	// flushTimer runs the next presence flush; Shutdown stops it.
	flushTimer *time.Timer
	room       *rate.Limiter // the room's chat budget, all clients together
	notReading time.Duration // see the const notReading

	handlers sync.WaitGroup // connection handlers running

	onLeftRoom func(ClientID) // tests: called when a client has been taken out of the room
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, clients: make(map[ClientID]*client), addrs: make(map[string]int),
		typers: make(map[ClientID]*client), room: rate.NewLimiter(cfg.RoomRate, cfg.RoomBurst),
		notReading: notReading}
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

// Handler serves the chat page at / and the WebSocket at /ws. The
// WebSocket accepts same-origin pages only (Origin must match Host), which
// does not stop DNS rebinding, where both are the attacker's name: serve
// Handler only to requests whose Host names the server, as the program's
// onlyHosts does. Connections beyond Config.MaxConns, or
// Config.MaxConnsPerAddr from one address, are refused with 503.
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
	return s.sayLocked(name, text, ref)
}

// sayLocked is say with s.mu held; it unlocks it.
func (s *Server) sayLocked(name, text, ref string) uint64 {
	s.seq++
	seq := s.seq
	slow := s.broadcastLocked(Message{Type: KindChat, Seq: seq, From: name, Ref: ref, Text: text}, nil)
	s.mu.Unlock()
	s.dropSlow(slow)
	return seq
}

// sayFrom broadcasts c's chat message, unless the room is over its budget
// (see behindLocked): then it returns why, for the refusal.
func (s *Server) sayFrom(c *client, text, ref string) (refused string) {
	s.mu.Lock()
	switch {
	case s.behindLocked():
		s.mu.Unlock()
		return "the room is busy: members are behind; try again"
	case !s.room.Allow():
		s.mu.Unlock()
		return fmt.Sprintf("the room is busy: at most %v messages a second from everyone (%d at once); try again",
			s.room.Limit(), s.room.Burst())
	}
	s.sayLocked(c.name, text, ref)
	return ""
}

// Budgets. Every member is sent every chat message, at most
// Config.SendRate a second, so the room may take no more than its members
// can be sent: Config.RoomRate, below SendRate, bounds it in the long run,
// and RoomBurst, below MaxQueue, at once. When members still fall behind
// (a server too busy to write at the send rate), the room waits for them:
// chat is refused as "busy" while a member that reads has half a queue
// waiting. A member is not waited for once it is not reading (a write to
// it blocked for notReading) or has been behind for Config.LagLimit: its
// queue then fills, and it is dropped with the reason.

// notReading is how long a write must have been blocked for its client to
// count as not reading (Server.notReading; tests lengthen it).
const notReading = 100 * time.Millisecond

// behindLocked reports whether a member that reads is far behind; it notes
// since when each member has been. s.mu is held.
func (s *Server) behindLocked() bool {
	now := time.Now()
	behind := false
	for _, c := range s.clients {
		if _, n := c.h.Queued(); n < s.cfg.MaxQueue/2 {
			c.behindSince = time.Time{}
			continue
		}
		if c.behindSince.IsZero() {
			c.behindSince = now
		}
		if now.Sub(c.behindSince) < s.cfg.LagLimit && c.blockedFor() < s.notReading {
			behind = true
		}
	}
	return behind
}

// broadcastLocked queues m for every client but except, on the Normal lane,
// and returns the clients whose queue was full, to drop. s.mu is held: the
// room's messages reach every client in the order they were queued under
// it.
func (s *Server) broadcastLocked(m Message, except *client) (slow []slowClient) {
	m.At = s.cfg.Now().UnixMilli()
	data := encode(m)
	for _, c := range s.clients {
		if c == except {
			continue
		}
		if err := c.send(data, seqsched.Normal); errors.Is(err, seqsched.ErrQueueFull) {
			slow = append(slow, slowClient{c, s.slowReason(c)})
		}
	}
	return slow
}

// slowClient is a client to drop, and why.
type slowClient struct {
	c   *client
	why string
}

// dropSlow disconnects clients whose queue was full, without sending them
// what is queued. s.mu is not held.
func (s *Server) dropSlow(slow []slowClient) {
	for _, sc := range slow {
		c := sc.c
		if !s.leave(c) {
			continue // already on its way out
		}
		s.cfg.Logger.Info("disconnecting slow client", "client", c.id, "why", sc.why)
		c.drop(nil, websocket.StatusPolicyViolation, sc.why)
	}
}

// slowReason is the close reason of c, whose queue is full: not reading,
// if a write to it has been blocked for notReading, as the room judged it
// (behindLocked); else behind, if the room saw it behind; else not
// reading, if a write is in progress, for a queue filled without the
// room's budget (Broadcast). A write in progress to a member the room
// waited for is one of many it reads: it is not called "not reading".
// s.mu is held.
func (s *Server) slowReason(c *client) string {
	max := s.cfg.MaxQueue
	blocked := c.blockedFor()
	switch {
	case blocked >= s.notReading || blocked > 0 && c.behindSince.IsZero():
		return fmt.Sprintf("too slow: not reading (a write blocked for %v, %d messages waiting)", blocked.Round(time.Millisecond), max)
	case !c.behindSince.IsZero():
		return fmt.Sprintf("too slow: %d messages waiting, behind for %v", max, time.Since(c.behindSince).Round(time.Millisecond))
	}
	return fmt.Sprintf("too slow: %d messages waiting", max)
}

// leave takes c out of the room, so that nothing more is broadcast to it,
// and has the others told (unless the room is shutting down). It reports
// whether this call took it out: only the first does.
func (s *Server) leave(c *client) bool {
	s.mu.Lock()
	if s.clients[c.id] != c {
		s.mu.Unlock()
		return false
	}
	delete(s.clients, c.id)
	delete(s.typers, c.id)
	if !s.closed {
		s.presence.add(Message{Type: KindLeave, Name: c.name, Members: len(s.clients), At: s.cfg.Now().UnixMilli()})
		s.presenceChangedLocked()
	}
	s.mu.Unlock()
	if s.onLeftRoom != nil {
		s.onLeftRoom(c.id)
	}
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

// kickBy carries out by's "/kick name": the member called name is kicked
// (see Kick) with the reason "by <by's name>", the room is told, and by
// gets done for its command ref; or by gets a refusal saying why not. Only
// the room's first member (the one connected longest) or an operator (see
// Config.OperatorToken) may kick.
func (s *Server) kickBy(by *client, name, ref string) {
	s.mu.Lock()
	var target, first *client
	for _, c := range s.clients {
		if c.name == name {
			target = c
		}
		if first == nil || c.id < first.id {
			first = c
		}
	}
	s.mu.Unlock()
	switch {
	case name == "":
		by.refuse(ref, "usage: /kick name")
		return
	case first != by && !by.operator.Load():
		by.refuse(ref, "only the room's first member or an operator may kick")
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
	if s.flushTimer != nil {
		s.flushTimer.Stop() // a flush already running sees closed
	}
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
