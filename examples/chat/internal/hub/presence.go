package hub

import (
	"context"
	"fmt"
	"time"

	"github.com/seqsched/seqsched"
)

// Presence: who joined, who left, who is typing.
//
// Sent to everyone as it happens, presence is where one client can hurt
// the others: each join, leave or typing toggle would be a message in
// every member's queue, written under the room's lock, so that a client
// connecting and closing in a loop fills the queues of everyone who is
// paced (and costs O(N) under the lock per event, O(N²) for N joins).
// Instead, an event only takes its place in the room's presence log,
// O(1), and marks the room dirty. At most once per Config.PresenceEvery a
// flush posts every member one presence task, tagged
// seqsched.Replace(presenceTag): a member holds at most one in its queue,
// so presence never fills a queue, whatever the churn. The task works out
// what to write when it runs, under s.mu: the joins and leaves logged
// since the member's last presence task (the last maxPresenceLog of
// them; a notice says how many it missed), then the typing indicators
// that changed since it was last told, one KindTyping each.

// presenceTag is the seqsched.Replace tag of presence tasks.
const presenceTag = "presence"

// maxPresenceLog is how many joins and leaves the room remembers for
// members whose presence task has not run yet.
const maxPresenceLog = 64

// maxTypers is how many members the room shows as typing at once; more
// typing members get no indicator until one stops.
const maxTypers = 8

// presenceLog is the room's last joins and leaves (KindJoin, KindLeave,
// with Name, Members and At), numbered from 1.
type presenceLog struct {
	events []Message // the last ones, oldest first, at most maxPresenceLog
	last   uint64    // number of the newest event (0: none yet)
}

// add logs m.
func (l *presenceLog) add(m Message) {
	if len(l.events) == maxPresenceLog {
		l.events = append(l.events[:0], l.events[1:]...)
	}
	l.events = append(l.events, m)
	l.last++
}

// since returns the events after number seen, and how many of those the
// log no longer holds.
func (l *presenceLog) since(seen uint64) (events []Message, missed uint64) {
	n := l.last - seen // events after seen
	if n > uint64(len(l.events)) {
		missed = n - uint64(len(l.events))
		n = uint64(len(l.events))
	}
	return l.events[uint64(len(l.events))-n:], missed
}

// presenceChangedLocked records that presence changed and makes sure a
// flush is on its way. s.mu is held.
func (s *Server) presenceChangedLocked() {
	if s.flushDue || s.closed {
		return
	}
	s.flushDue = true
	if s.flushTimer == nil {
		s.flushTimer = time.AfterFunc(s.cfg.PresenceEvery, s.flushPresence) // stopped by Shutdown
	} else {
		s.flushTimer.Reset(s.cfg.PresenceEvery)
	}
}

// flushPresence posts every member a presence task, replacing the one it
// may still have queued.
func (s *Server) flushPresence() {
	s.mu.Lock()
	s.flushDue = false
	if s.closed {
		s.mu.Unlock()
		return
	}
	for _, c := range s.clients {
		_ = c.h.Post(c.ctx, c.writePresence, seqsched.Normal, seqsched.Replace(presenceTag)) // cannot be full: a replacement takes no room, and a queue full of chat means a blocked write, dropped with the chat
	}
	s.mu.Unlock()
}

// writePresence is c's presence task: it writes what changed since c was
// last told.
func (c *client) writePresence(ctx context.Context) error {
	s := c.s
	s.mu.Lock()
	events, missed := s.presence.since(c.presenceSeen)
	c.presenceSeen = s.presence.last
	var frames [][]byte
	if missed > 0 {
		frames = append(frames, encode(Message{Type: KindNotice, At: s.cfg.Now().UnixMilli(),
			Text: fmt.Sprintf("%d joins and leaves not shown (too many at once)", missed)}))
	}
	for _, m := range events {
		frames = append(frames, encode(m))
	}
	// Typing: stopped for those c was told of and who stopped (or left),
	// started for those typing now whom c was not told of.
	for id, name := range c.toldTyping {
		if o := s.typers[id]; o == nil {
			delete(c.toldTyping, id)
			frames = append(frames, encode(Message{Type: KindTyping, Name: name}))
		}
	}
	for id, o := range s.typers {
		if _, told := c.toldTyping[id]; !told && o != c {
			c.toldTyping[id] = o.name
			frames = append(frames, encode(Message{Type: KindTyping, Name: o.name, Typing: true}))
		}
	}
	s.mu.Unlock()
	for _, f := range frames {
		if err := c.write(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// typing records that c started (on) or stopped typing; the others are
// told with the next presence flush, the latest state only: a client
// toggling fast costs O(1) a toggle.
func (s *Server) typing(c *client, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clients[c.id] != c || (s.typers[c.id] != nil) == on {
		return
	}
	if on {
		if len(s.typers) == maxTypers {
			return
		}
		s.typers[c.id] = c
	} else {
		delete(s.typers, c.id)
	}
	s.presenceChangedLocked()
}
