package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"unicode/utf8"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/seqsched/seqsched"
)

// client is one connection. Everything written to conn is a task on the
// client's session, so writes never overlap and keep their order.
type client struct {
	id      ClientID
	name    string
	conn    *websocket.Conn
	s       *Server
	limiter *rate.Limiter

	once    sync.Once
	evicted chan struct{} // closed by evict
	code    websocket.StatusCode
	reason  string
	drain   bool // flush the queue before closing
}

// send queues data for the client. It never blocks.
func (c *client) send(data []byte, prio seqsched.Priority) error {
	_, err := c.s.sched.Go(context.Background(), c.id, func(ctx context.Context) error {
		return c.write(ctx, data)
	}, prio)
	return err
}

// errEvicted fails the writes queued for a client that was evicted without
// a drain: it gets nothing more after its kick message.
var errEvicted = errors.New("hub: client evicted")

// write sends one message, bounded by the write timeout.
func (c *client) write(ctx context.Context, data []byte) error {
	select {
	case <-c.evicted:
		if !c.drain {
			return errEvicted
		}
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, c.s.cfg.WriteTimeout)
	defer cancel()
	return c.conn.Write(ctx, websocket.MessageText, data)
}

// evict takes the client out of the room at once (no more broadcasts),
// tells the others it left (unless the room is shutting down), and tells
// its handler to close the connection with code and reason, after flushing
// its queue if drain is set. Only the first call counts.
func (c *client) evict(code websocket.StatusCode, reason string, drain bool) {
	c.once.Do(func() {
		s := c.s
		var slow []*client
		s.mu.Lock()
		delete(s.clients, c.id)
		if !s.closed {
			slow = s.broadcastLocked(Message{Type: KindLeave, Name: c.name, Members: len(s.clients)}, nil)
		}
		s.mu.Unlock()
		c.code, c.reason, c.drain = code, reason, drain
		close(c.evicted)
		if s.onEvict != nil {
			s.onEvict(c.id)
		}
		s.evictSlow(slow)
	})
}

// serveWS runs one connection from upgrade to goodbye.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil) // same-origin pages and non-browser clients only
	if err != nil {
		return // Accept has answered the request
	}
	c := s.join(conn)
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
		// The client left (or broke the protocol). Nothing queued can
		// reach it any more: Remove's drain runs the writes, which fail
		// at once, and forgets the session.
		c.evict(websocket.StatusNormalClosure, "", false)
		why = "disconnected: " + closeText(err)
		_ = conn.CloseNow()
		s.remove(c)
	case <-c.evicted:
		why = c.reason
		if c.drain {
			s.remove(c) // flush first: the client gets everything queued, then the close
			_ = conn.Close(c.code, c.reason)
		} else {
			_ = conn.Close(c.code, c.reason) // close first: what is queued would only delay it
			s.remove(c)
		}
		_ = conn.CloseNow()
		<-readErr
	}
	s.cfg.Logger.Info("client left", "client", c.id, "reason", why)
	if s.cfg.OnLeave != nil {
		s.cfg.OnLeave(c.id, why)
	}
}

// join registers a new client, queues its welcome and tells the others,
// or returns nil once Shutdown has begun. The welcome is the first message
// on the client's session, and the join takes its place in the room's one
// order: a client sees every chat message said after its join, and none
// said before.
func (s *Server) join(conn *websocket.Conn) *client {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.nextID++
	c := &client{
		id:      s.nextID,
		name:    fmt.Sprintf("guest-%d", s.nextID),
		conn:    conn,
		s:       s,
		limiter: rate.NewLimiter(s.cfg.RateLimit, s.cfg.Burst),
		evicted: make(chan struct{}),
	}
	s.clients[c.id] = c
	s.handlers.Add(1)
	_ = c.send(encode(Message{Type: KindWelcome, ID: c.id, Name: c.name, Members: len(s.clients)}), seqsched.Normal) // its first task: cannot be full
	slow := s.broadcastLocked(Message{Type: KindJoin, Name: c.name, Members: len(s.clients)}, c)
	s.mu.Unlock()
	s.evictSlow(slow)
	return c
}

// remove drains the client's session (drain-then-remove) within the drain
// timeout. If that runs out, the session still finishes draining on its
// own: its writes are bounded by the write timeout.
func (s *Server) remove(c *client) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	if err := s.sched.Remove(ctx, c.id); err != nil {
		s.cfg.Logger.Warn("drain cut short", "client", c.id, "err", err)
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
