package seqwatermill

import (
	"context"
	"slices"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
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
	stopped bool                          // release ran: no key halts any more
	held    map[string][]*message.Message // halted keys: held messages, oldest first; nil once released
}

// task is the task of message m of key or, with m nil, the one a halt
// posts: it handles the key's held messages, then m, in order, and counts
// each out of the gate once it is settled (or given up). If one halts the
// key again, it and those after it are held, still counted in.
func (sn *subscription) task(ctx context.Context, key string, m *message.Message) error {
	msgs, released := sn.take(key)
	if m != nil {
		msgs = append(msgs, m)
	}
	settled := 0
	defer func() { // only when a backoff or logger panicked, or called runtime.Goexit
		for ; settled < len(msgs); settled++ {
			if !sn.o.ackOnReceive {
				msgs[settled].Nack() // failed: for the subscriber to redeliver (unrun logs it)
			}
			sn.gate.done(key)
		}
	}()
	for i, msg := range msgs {
		switch {
		case released:
			sn.lost(msg, fieldsOf(key, msg), "its key was halted at close")
		case sn.handle(ctx, key, msg):
			if sn.hold(key, msgs[i:]) {
				settled = len(msgs)
				sn.log.Error("Key halted: its message was nacked on its last attempt; Resume the key to hand it to the handler again",
					ErrHalted, fieldsOf(key, msg).Add(watermill.LogFields{"attempts": sn.o.attempts}))
				return nil
			}
			released = true // the subscription is ending: the key's messages go as a halted key's would
			sn.lost(msg, fieldsOf(key, msg), "its key was halted at close")
		}
		settled++
		sn.gate.done(key)
	}
	return nil
}

// take returns the messages key's halt held, for the task that runs after
// Resume, and forgets the halt. Once released (the subscription ended with
// key halted) it returns none and true: the key's later messages are given
// up as the held ones were.
func (sn *subscription) take(key string) (msgs []*message.Message, released bool) {
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
func (sn *subscription) hold(key string, msgs []*message.Message) bool {
	h := &sn.halts
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = map[string][]*message.Message{}
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
	type heldMsg struct {
		key string
		msg *message.Message
	}
	h := &sn.halts
	h.mu.Lock()
	h.stopped = true
	var keys []string
	var given []heldMsg
	for key, msgs := range h.held {
		if msgs != nil {
			keys = append(keys, key)
			for _, m := range msgs {
				given = append(given, heldMsg{key, m})
			}
			h.held[key] = nil
		}
	}
	h.mu.Unlock()
	for _, g := range given {
		sn.lost(g.msg, fieldsOf(g.key, g.msg), "its key was halted at close")
		sn.gate.done(g.key)
	}
	for _, key := range keys {
		_ = sn.sched.Resume(key)
	}
}

// fieldsOf returns the log fields of msg of key.
func fieldsOf(key string, msg *message.Message) watermill.LogFields {
	return watermill.LogFields{"message_uuid": msg.UUID, "key": key}
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
	for sn := range s.subs {
		_ = sn.sched.Resume(key) // only a key a map cannot hold fails, and a string is not one
	}
	return nil
}

// Paused reports whether key is halted (see [WithHaltOnNack]) in a
// subscription of s that has not ended, and not yet resumed. It never
// waits, and is safe for concurrent use.
func (s *Subscriber) Paused(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sn := range s.subs {
		if sn.sched.Paused(key) {
			return true
		}
	}
	return false
}

// A Controller reaches the Subscribers registered with it by
// [WithController]: those that a [Decorator] makes, one per Router
// handler, which the Router's user never sees. It resumes keys that
// [WithHaltOnNack] halted, in whichever of them they are:
//
//	var ctl seqwatermill.Controller
//	router.AddSubscriberDecorators(seqwatermill.Decorator(seqwatermill.WithKeyMetadata("account_id"),
//		seqwatermill.WithRetries(3, nil), seqwatermill.WithHaltOnNack(), seqwatermill.WithController(&ctl)))
//	...
//	err := ctl.Resume("acct-7") // an operator fixed the account
//
// A Subscriber is forgotten once closed. The zero value is ready to use; a
// Controller must not be copied after first use. It is safe for concurrent
// use.
type Controller struct {
	mu     sync.Mutex
	subs   map[*Subscriber]struct{}
	closed bool // a registered Subscriber was closed, and none is left
}

// register adds s, made with WithController(c).
func (c *Controller) register(s *Subscriber) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs == nil {
		c.subs = map[*Subscriber]struct{}{}
	}
	c.subs[s] = struct{}{}
	c.closed = false
}

// unregister forgets s, which Close closed.
func (c *Controller) unregister(s *Subscriber) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.subs, s)
	c.closed = len(c.subs) == 0
}

// Resume ends the halt of key in every Subscriber registered with c, as
// [Subscriber.Resume] does. It never waits. It returns [ErrClosed] when
// every Subscriber registered with c was closed (the Router closed), and
// nil otherwise, also before the Router made any.
func (c *Controller) Resume(key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	for s := range c.subs {
		_ = s.Resume(key) // ErrClosed: s is closing, and gives its halted keys' messages up
	}
	return nil
}

// Paused reports whether key is halted in a Subscriber registered with c
// (see [Subscriber.Paused]). It never waits.
func (c *Controller) Paused(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.subs {
		if s.Paused(key) {
			return true
		}
	}
	return false
}
