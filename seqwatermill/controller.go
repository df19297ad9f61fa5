package seqwatermill

import (
	"slices"
	"sync"
)

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
// every Subscriber registered with c was closed (the Router closed them),
// and nil otherwise, also before the Router made any. The Router closes
// its subscribers on goroutines of its own, and Router.Close can return a
// moment before they are closed: until then Resume returns nil, and does
// nothing, since their subscriptions have ended.
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

// Halted returns the keys halted in the Subscribers registered with c (see
// [Subscriber.Halted]), sorted and without duplicates. It never waits.
func (c *Controller) Halted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var keys []string
	for s := range c.subs {
		keys = append(keys, s.Halted()...)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// Backlog returns how many messages of key the Subscribers registered with
// c hold (see [Subscriber.Backlog]). It never waits.
func (c *Controller) Backlog(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for s := range c.subs {
		n += s.Backlog(key)
	}
	return n
}
