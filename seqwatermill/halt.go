package seqwatermill

import (
	"context"
	"slices"
	"sync"

	"github.com/seqsched/seqsched"
)

// Halting a key (WithHaltOnNack). A key halts inside its own task: the
// task pauses the key's session (Scheduler.Pause, which takes effect
// before the session's next task) and keeps the messages it has not
// settled, all under halts.mu, and posts a task with no message of its
// own that Resume will run. Every task of a key first takes the key's held
// messages, so that across a halt a key's messages are handled in the
// order they came, whatever lane the later ones were queued in.
//
// The end of the subscription (release) takes halts.mu too: it either
// finds a key halted, and resumes it so that its queued tasks run and see
// the end at once, or is found by hold, which then halts nothing. Pausing
// under the same lock is why this uses Pause rather than the HaltOnError
// task option, whose pause lands after the task returned, where a release
// in between would resume nothing and leave the key paused until the
// close timeout.

// halts holds the keys of a subscription halted by WithHaltOnNack.
type halts struct {
	mu      sync.Mutex
	stopped bool               // release ran: no key halts any more
	held    map[string][]*held // halted keys (order keys): held messages, oldest first; nil once released
}

// take returns the messages key's halt held, for the task that runs after
// Resume, and forgets the halt. Once released (the subscription ended with
// key halted) it returns none and true: the key's later messages are given
// up as the held ones were.
func (sn *subscription) take(key string) (msgs []*held, released bool) {
	h := &sn.halts
	h.mu.Lock()
	defer h.mu.Unlock()
	msgs, halted := h.held[key]
	if !halted {
		return nil, false
	}
	if h.stopped {
		return nil, true
	}
	delete(h.held, key)
	return msgs, false
}

// hold halts key, keeping msgs (the nacked message first), and reports
// whether it did: once the subscription is ending it marks key released
// instead, and the caller gives msgs up.
func (sn *subscription) hold(key string, msgs []*held) bool {
	h := &sn.halts
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = map[string][]*held{}
	}
	if h.stopped {
		h.held[key] = nil
		return false
	}
	// Neither call fails: the scheduler is shut down only after release,
	// and it takes this package's tasks without bounds.
	_ = sn.sched.Pause(key)
	_ = sn.sched.Post(context.Background(), key, func(ctx context.Context) error {
		return sn.task(ctx, key, nil)
	}, seqsched.High)
	h.held[key] = slices.Clone(msgs)
	return true
}

// release ends every halt as the subscription ends: no key halts any more,
// the held messages are given up (left un-acked, or, with ackOnReceive,
// dropped and logged), and the halted keys are resumed, so that their
// queued tasks run, find their key released, and give their messages up
// at once; the drain does not wait for them. Called after stop is closed.
func (sn *subscription) release() {
	h := &sn.halts
	h.mu.Lock()
	h.stopped = true
	var keys []string
	var given []*held
	for key, msgs := range h.held {
		if msgs != nil {
			keys = append(keys, key)
			given = append(given, msgs...)
			h.held[key] = nil
		}
	}
	h.mu.Unlock()
	for _, m := range given {
		sn.mu.Lock()
		msg := m.msg
		sn.mu.Unlock()
		sn.lost(m, msg, "its key was halted at close")
		sn.done(m)
	}
	for _, key := range keys {
		_ = sn.sched.Resume(key)
	}
}

// Resume ends the halt of key (see [WithHaltOnNack]) in every subscription
// of s: the message that halted it is handed to the handler again, first,
// then the key's later messages, in order. Resuming a key that is not
// halted does nothing. Resume never waits, and is safe for concurrent use.
// It returns [ErrClosed] once Close has begun (Close has given the halted
// keys' messages up), and nil otherwise.
func (s *Subscriber) Resume(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	okey := orderKey(key)
	for sn := range s.subs {
		_ = sn.sched.Resume(okey) // only a key a map cannot hold fails, and a string is not one
	}
	return nil
}

// Paused reports whether key is halted (see [WithHaltOnNack]) in a
// subscription of s that has not ended, and not yet resumed. It never
// waits, and is safe for concurrent use.
func (s *Subscriber) Paused(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	okey := orderKey(key)
	for sn := range s.subs {
		if sn.sched.Paused(okey) {
			return true
		}
	}
	return false
}

// Halted returns the keys halted (see [WithHaltOnNack]) in the
// subscriptions of s that have not ended, and not yet resumed, sorted and
// without duplicates. It never waits, and is safe for concurrent use.
func (s *Subscriber) Halted() []string {
	s.mu.Lock()
	subs := make([]*subscription, 0, len(s.subs))
	for sn := range s.subs {
		subs = append(subs, sn)
	}
	s.mu.Unlock()
	var keys []string
	for _, sn := range subs {
		keys = append(keys, sn.halted()...)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// halted returns the keys halted in sn, as their messages carry them.
func (sn *subscription) halted() []string {
	h := &sn.halts
	h.mu.Lock()
	defer h.mu.Unlock()
	var keys []string
	for okey, msgs := range h.held {
		if len(msgs) > 0 && sn.sched.Paused(okey) {
			keys = append(keys, msgs[0].key)
		}
	}
	return keys
}

// Backlog returns how many messages of key the subscriptions of s hold:
// queued behind the key, in the handler, waiting for a retry, or held by
// a halt. These count against WithMaxPerKey and
// WithMaxBuffered. It never waits, and is safe for concurrent use.
func (s *Subscriber) Backlog(key string) int {
	okey := orderKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for sn := range s.subs {
		n += sn.gate.count(okey)
	}
	return n
}
