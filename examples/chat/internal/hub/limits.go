package hub

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/coder/websocket"
)

// Limits on what one client, or many, may hold of the server: connections
// (admit), and time (pingLoop). The rates a client may send at are in
// readLoop; the room's, in say.

// admit counts a new connection from addr, or says why it is refused:
// the room serves at most Config.MaxConns connections, and
// Config.MaxConnsPerAddr from one address. Every admitted connection is
// given back with unadmit.
func (s *Server) admit(addr string) (refused string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.conns >= s.cfg.MaxConns:
		return fmt.Sprintf("the room is full (%d connections)", s.cfg.MaxConns)
	case s.addrs[addr] >= s.cfg.MaxConnsPerAddr:
		return fmt.Sprintf("too many connections from your address (at most %d)", s.cfg.MaxConnsPerAddr)
	}
	s.conns++
	s.addrs[addr]++
	return ""
}

// unadmit gives back a connection admit counted.
func (s *Server) unadmit(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns--
	if s.addrs[addr]--; s.addrs[addr] == 0 {
		delete(s.addrs, addr)
	}
}

// remoteIP is the address a request came from, without its port. Behind
// a reverse proxy it is the proxy's: count per client there instead.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// statusUnresponsive ends a connection that did not answer a ping: it is
// closed at once, without the close handshake it would not answer either.
const statusUnresponsive = websocket.StatusPolicyViolation + 1000

// pingLoop pings the client every Config.PingEvery until its ctx ends; a
// client that does not answer within Config.PingTimeout (gone without a
// word, or holding the connection without reading) leaves the room and
// its connection is closed with the reason.
func (c *client) pingLoop() {
	t := time.NewTicker(c.s.cfg.PingEvery)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.s.cfg.PingTimeout)
		err := c.conn.Ping(ctx) // the pong is read by readLoop
		cancel()
		if err == nil {
			continue
		}
		if c.ctx.Err() == nil && c.s.leave(c) {
			c.s.cfg.Logger.Info("disconnecting unresponsive client", "client", c.id)
			c.end(statusUnresponsive, fmt.Sprintf("no answer to a ping within %v", c.s.cfg.PingTimeout), false)
		}
		return
	}
}
