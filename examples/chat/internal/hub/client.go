package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
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
	limiter *rate.Limiter
	// typingTag is the seqsched.Replace tag of this client's typing
	// indicators in the others' queues; typing is its state as last
	// broadcast, guarded by s.mu.
	typingTag string
	typing    bool

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
	if c.s.cfg.BeforeWrite != nil {
		c.s.cfg.BeforeWrite(c.id, data)
	}
	ctx, cancel := context.WithTimeout(ctx, c.s.cfg.WriteTimeout)
	defer cancel()
	return c.conn.Write(ctx, websocket.MessageText, data)
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
		s.release(c)
	case <-c.ended:
		why = c.reason
		if c.drain {
			s.release(c) // shutdown: the client gets everything queued, then the close
		} else {
			s.discard(c) // kicked or too slow: nothing more, then the close
		}
		_ = conn.Close(c.code, c.reason)
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
		ended:   make(chan struct{}),

		typingTag: fmt.Sprintf("typing/%d", s.nextID),
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	s.clients[c.id] = c
	s.handlers.Add(1)
	_ = c.send(encode(Message{Type: KindWelcome, ID: c.id, Name: c.name, Members: len(s.clients)}), seqsched.Normal) // its first task: cannot be full
	slow := s.broadcastLocked(Message{Type: KindJoin, Name: c.name, Members: len(s.clients)}, c)
	s.mu.Unlock()
	s.dropSlow(slow)
	return c
}

// release closes the client's handle, its only one: the session drains
// (the messages still queued are written, or dropped unsent once the
// client is gone) and is forgotten, within the drain timeout. If that runs
// out, the session still finishes on its own: its writes are bounded by
// the write timeout.
func (s *Server) release(c *client) {
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
		if name, ok := strings.CutPrefix(in.Text, kickCommand); ok && (name == "" || name[0] == ' ') {
			c.s.kickBy(c, strings.TrimSpace(name), in.Ref) // a command, not chat: not rate limited
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
			c.s.say(c.name, in.Text, in.Ref)
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
