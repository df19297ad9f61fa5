package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/seqsched/seqsched"
)

// client is one connection. Everything written to conn is a task on the
// client's session, posted through its handle h, so writes never overlap
// and keep their order.
type client struct {
	id      ClientID
	name    string
	conn    *websocket.Conn
	s       *Server
	h       *seqsched.Session[ClientID]
	limiter *rate.Limiter // its chat messages
	reads   *rate.Limiter // its frames, whatever they hold
	cmds    *rate.Limiter // its commands
	// operator is set once the client sent "/op" with the operator token.
	operator atomic.Bool
	// writing is when the write in progress to the client began, in Unix
	// nanoseconds, or 0: see blockedFor.
	writing atomic.Int64

	// Guarded by s.mu: the last presence event the client was told of,
	// and the members it was last told are typing (see presence.go).
	presenceSeen uint64
	toldTyping   map[ClientID]string
	// behindSince is when the client was first seen with half a queue
	// waiting, or zero (see behindLocked); guarded by s.mu.
	behindSince time.Time

	// ctx is the connection's: every message for the client is posted with
	// it, and cancel ends it once the client is gone, so that what is still
	// queued for it is dropped unsent (and logged at Debug, not as a
	// failure). It lives as long as the connection, as a request's ctx
	// lives as long as the request.
	ctx    context.Context
	cancel context.CancelFunc

	once   sync.Once
	ended  chan struct{} // closed by end: the handler closes the connection
	code   websocket.StatusCode
	reason string
	drain  bool // deliver what is queued before closing (shutdown)
}

// send queues data for the client, with opts (a priority, a Replace tag).
// It never blocks. It fails with seqsched.ErrQueueFull for a client too
// slow to keep up, and with an error wrapping seqsched.ErrSessionClosing
// for one on its way out.
func (c *client) send(data []byte, opts ...seqsched.TaskOption) error {
	return c.h.Post(c.ctx, func(ctx context.Context) error {
		return c.write(ctx, data)
	}, opts...)
}

// write sends one message, bounded by the write timeout. ctx is the task's:
// it ends when the client is gone or its session discarded, and the write
// with it.
func (c *client) write(ctx context.Context, data []byte) error {
	c.writing.Store(time.Now().UnixNano())
	defer c.writing.Store(0)
	if c.s.cfg.BeforeWrite != nil {
		c.s.cfg.BeforeWrite(c.id, data)
	}
	ctx, cancel := context.WithTimeout(ctx, c.s.cfg.WriteTimeout)
	defer cancel()
	return c.conn.Write(ctx, websocket.MessageText, data)
}

// blockedFor returns how long the write in progress to the client has
// taken so far, or 0 if none is in progress. Writes are one at a time
// (the session's), so a long one means the client's socket takes no more
// data: it is not reading.
func (c *client) blockedFor() time.Duration {
	start := c.writing.Load()
	if start == 0 {
		return 0
	}
	return max(time.Since(time.Unix(0, start)), time.Nanosecond)
}

// drop disconnects a client that has left the room (Kick, or too slow)
// without sending it what is queued. A High task does it, so that it comes
// right after the message being written, if any (cutting that short would
// close the connection without a reason): it writes last, if set, then
// discards the rest of the queue, so that nothing queued reaches the
// client after last, and has the handler close the connection with code
// and reason. If even the High queue is full, the handler discards the
// queue and closes at once.
func (c *client) drop(last []byte, code websocket.StatusCode, reason string) {
	err := c.h.Post(c.ctx, func(ctx context.Context) error {
		var err error
		if last != nil {
			err = c.write(ctx, last)
		}
		// Called from the session's own task, Discard cannot wait for
		// that task to return and says so, having done the discarding:
		// every task still queued resolves unrun, and new ones are refused.
		if derr := c.h.Discard(ctx); !errors.Is(derr, seqsched.ErrWouldDeadlock) {
			err = errors.Join(err, derr)
		}
		c.end(code, reason, false)
		return err
	}, seqsched.High)
	if err != nil { // ErrQueueFull, or the client is leaving already
		c.end(code, reason, false)
	}
}

// end tells the client's handler to close the connection with code and
// reason: after delivering what is queued if drain is set, else after
// discarding it. Only the first call counts.
func (c *client) end(code websocket.StatusCode, reason string, drain bool) {
	c.once.Do(func() {
		c.code, c.reason, c.drain = code, reason, drain
		close(c.ended)
	})
}

// serveWS runs one connection from upgrade to goodbye.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	addr := remoteIP(r)
	if why := s.admit(addr); why != "" {
		http.Error(w, "chat: "+why, http.StatusServiceUnavailable)
		return
	}
	defer s.unadmit(addr)
	conn, err := websocket.Accept(w, r, nil) // same-origin pages and non-browser clients only
	if err != nil {
		return // Accept has answered the request
	}
	c := s.join(r.Context(), conn)
	if c == nil {
		_ = conn.Close(websocket.StatusGoingAway, reasonShutdown)
		return
	}
	defer s.handlers.Done()
	s.cfg.Logger.Info("client joined", "client", c.id, "name", c.name)

	readErr := make(chan error, 1)
	go func() { readErr <- c.readLoop() }() // ends when conn closes; waited for below
	pinged := make(chan struct{})
	go func() { // ends when c.ctx does, which the handler ends before it returns
		defer close(pinged)
		c.pingLoop()
	}()
	defer func() { <-pinged }()

	var why string
	select {
	case err := <-readErr:
		// The client left (or broke the protocol): nothing queued can
		// reach it any more. Its queued messages are dropped unsent and
		// a write in progress stops; closing the handle then forgets
		// the session.
		why = "disconnected: " + closeText(err)
		c.cancel()
		_ = conn.CloseNow()
		s.leave(c)
		s.closeHandle(c)
	case <-c.ended:
		why = c.reason
		if c.drain {
			s.closeHandle(c) // shutdown: the client gets everything queued, then the close
		} else {
			s.discard(c) // kicked or too slow: nothing more, then the close
		}
		if c.code == statusUnresponsive {
			_ = conn.CloseNow() // it would not answer a close either
		} else {
			_ = conn.Close(c.code, c.reason)
		}
		c.cancel()
		<-readErr
	}
	s.cfg.Logger.Info("client left", "client", c.id, "reason", why)
	if s.cfg.OnLeave != nil {
		s.cfg.OnLeave(c.id, why)
	}
}

// join registers a new client, opens its session, queues its welcome and
// tells the others, or returns nil once Shutdown has begun. The welcome is
// the first message on the client's session, and the join takes its place
// in the room's one order: a client sees every chat message said after its
// join, and none said before. ctx is the connection's.
func (s *Server) join(ctx context.Context, conn *websocket.Conn) *client {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.nextID++
	h, err := s.sched.Open(s.nextID)
	if err != nil { // the scheduler shuts down only after s.closed is set
		s.mu.Unlock()
		s.cfg.Logger.Error("cannot open a session", "client", s.nextID, "err", err)
		return nil
	}
	c := &client{
		id:      s.nextID,
		name:    fmt.Sprintf("guest-%d", s.nextID),
		conn:    conn,
		s:       s,
		h:       h,
		limiter: rate.NewLimiter(s.cfg.RateLimit, s.cfg.Burst),
		reads:   rate.NewLimiter(s.cfg.ReadRate, s.cfg.ReadBurst),
		cmds:    rate.NewLimiter(s.cfg.CommandRate, s.cfg.CommandBurst),
		ended:   make(chan struct{}),

		toldTyping: make(map[ClientID]string),
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	s.clients[c.id] = c
	s.handlers.Add(1)
	_ = c.send(encode(Message{Type: KindWelcome, ID: c.id, Name: c.name, Members: len(s.clients)}), seqsched.Normal) // its first task: cannot be full
	// The others hear of it with the next presence flush: O(1) here,
	// however many members there are.
	s.presence.add(Message{Type: KindJoin, Name: c.name, Members: len(s.clients), At: s.cfg.Now().UnixMilli()})
	c.presenceSeen = s.presence.last // not its own join
	s.presenceChangedLocked()
	s.mu.Unlock()
	return c
}

// closeHandle closes the client's handle, its only one: the session drains
// (the messages still queued are written, or dropped unsent once the
// client is gone) and is forgotten, within the drain timeout. If that runs
// out, the session still finishes on its own: its writes are bounded by
// the write timeout.
func (s *Server) closeHandle(c *client) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	if err := c.h.Close(ctx); err != nil {
		s.cfg.Logger.Warn("drain cut short", "client", c.id, "err", err)
	}
}

// discard ends the client's session without writing what is queued. Its
// last task (see drop) has usually done so already, which closed the
// handle; otherwise a write in progress is cut short.
func (s *Server) discard(c *client) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	if err := c.h.Discard(ctx); err != nil && !errors.Is(err, seqsched.ErrSessionClosing) {
		s.cfg.Logger.Warn("discard cut short", "client", c.id, "err", err)
	}
}

// readLoop reads the client's chat messages until the connection ends.
// Every message that carries a ref is answered, to its sender: by the chat
// message itself (with the ref) once it is said in the room, or by a
// refusal (with the ref and the reason) when it is not. A client can thus
// tell the user which messages were not delivered; none is lost silently.
func (c *client) readLoop() error {
	for {
		// Paced: a client that sends faster waits, held back by TCP.
		// c.ctx ends when the client leaves, and the wait with it.
		if err := c.reads.Wait(c.ctx); err != nil {
			return err
		}
		_, data, err := c.conn.Read(context.Background())
		if err != nil {
			return err
		}
		var in inbound
		if err := json.Unmarshal(data, &in); err != nil || len(in.Ref) > maxRef {
			c.warn(fmt.Sprintf(`not understood: send {"text": "...", "ref": "..."} (ref at most %d bytes)`, maxRef))
			continue
		}
		if in.Typing != nil && in.Text == "" {
			c.s.typing(c, *in.Typing)
			continue
		}
		if cmd, arg, ok := command(in.Text); ok {
			c.command(cmd, arg, in.Ref) // a command, not chat: its own rate limit
			continue
		}
		switch n := utf8.RuneCountInString(in.Text); {
		case n == 0:
			c.refuse(in.Ref, "empty message")
		case n > MaxText:
			c.refuse(in.Ref, fmt.Sprintf("too long: %d characters, at most %d", n, MaxText))
		case !c.limiter.Allow():
			c.refuse(in.Ref, fmt.Sprintf("too fast: at most %v messages a second (%d at once); try again",
				c.limiter.Limit(), c.limiter.Burst()))
		default:
			if why := c.s.sayFrom(c, in.Text, in.Ref); why != "" {
				c.refuse(in.Ref, why)
			}
		}
	}
}

// warn sends the client a warning ahead of its queued chat.
func (c *client) warn(text string) {
	_ = c.send(encode(Message{Type: KindWarn, Text: text}), seqsched.High)
}

// refuse tells the client that its message ref was not delivered, and why,
// ahead of its queued chat.
func (c *client) refuse(ref, why string) {
	_ = c.send(encode(Message{Type: KindRefused, Ref: ref, Text: why}), seqsched.High)
}

// closeText describes why a read ended.
func closeText(err error) string {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return fmt.Sprintf("closed by client (%d %s)", int(ce.Code), ce.Reason)
	}
	return err.Error()
}
