package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

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

// evict takes the client out of the room at once (no more broadcasts) and
// tells its handler to close the connection with code and reason, after
// flushing its queue if drain is set. Only the first call counts.
func (c *client) evict(code websocket.StatusCode, reason string, drain bool) {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.clients, c.id)
		c.s.mu.Unlock()
		c.code, c.reason, c.drain = code, reason, drain
		close(c.evicted)
		if c.s.onEvict != nil {
			c.s.onEvict(c.id)
		}
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
	_ = c.send(encode(Message{Type: KindWelcome, ID: c.id, Name: c.name}), seqsched.Normal)

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

// join registers a new client, or returns nil once Shutdown has begun.
func (s *Server) join(conn *websocket.Conn) *client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
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
func (c *client) readLoop() error {
	for {
		_, data, err := c.conn.Read(context.Background())
		if err != nil {
			return err
		}
		var in inbound
		if err := json.Unmarshal(data, &in); err != nil || in.Text == "" {
			c.warn(`send {"text": "..."}`)
			continue
		}
		if !c.limiter.Allow() {
			c.warn(fmt.Sprintf("slow down: at most %v messages per second", c.limiter.Limit()))
			continue
		}
		c.s.Broadcast(c.name, in.Text)
	}
}

// warn sends the client a warning ahead of its queued chat.
func (c *client) warn(text string) {
	_ = c.send(encode(Message{Type: KindWarn, Text: text}), seqsched.High)
}

// closeText describes why a read ended.
func closeText(err error) string {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return fmt.Sprintf("closed by client (%d %s)", int(ce.Code), ce.Reason)
	}
	return err.Error()
}
