package seqwatermill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/seqsched/seqsched"
)

// A subscription is one Subscribe: one dispatch goroutine (run) reads the
// wrapped subscriber's channel and posts each message as a task on its
// key's session of a seqsched scheduler; the task sends a copy on out,
// waits for the consumer's Ack or Nack, and settles the wrapped message.
// The scheduler gives the order per key and the parallelism across keys;
// the gate bounds what is held; halts holds the keys WithHaltOnNack halted
// (halt.go). How it ends: run stops reading, closes stop (queued messages
// not yet sent are skipped, unless ackOnReceive), releases the halted keys
// (their messages are given up), drains the scheduler within closeTimeout
// (then gives up: the tasks' ctx ends), and only then closes out, so no
// task can send on a closed channel.
type subscription struct {
	s     *Subscriber
	o     *options
	topic string
	in    <-chan *message.Message
	out   chan *message.Message
	stop  chan struct{} // closed when the subscription begins to end
	gate  gate
	halts halts
	sched *seqsched.Scheduler[string]
	log   watermill.LoggerAdapter
}

func newSubscription(s *Subscriber, topic string, in <-chan *message.Message) (*subscription, error) {
	sn := &subscription{
		s: s, o: &s.opts, topic: topic, in: in,
		out:  make(chan *message.Message),
		stop: make(chan struct{}),
		gate: gate{maxHeld: s.opts.maxBuffered, maxPerKey: s.opts.maxPerKey,
			perKey: map[string]int{}, wake: make(chan struct{}, 1)},
		log: guardedLogger{s.opts.logger}.With(watermill.LogFields{"topic": topic}),
	}
	sched, err := seqsched.New[string](
		seqsched.WithMaxConcurrency(s.opts.maxConc),
		seqsched.WithErrorHandler(sn.unrun),
		seqsched.WithLogger(slog.New(slog.DiscardHandler)), // every failure reaches unrun
	)
	if err != nil {
		return nil, fmt.Errorf("seqwatermill: %w", err)
	}
	sn.sched = sched
	return sn, nil
}

// run is the dispatch loop, then the end of the subscription. The end is
// deferred: a KeyFunc that calls runtime.Goexit, or a logger that panics,
// unwinds dispatch, and the subscription still ends as its ctx's end would,
// closing out only after its tasks returned.
func (sn *subscription) run(ctx context.Context) {
	defer sn.end()
	sn.dispatch(ctx)
}

// end ends the subscription (see subscription) and closes out.
func (sn *subscription) end() {
	defer close(sn.out)
	close(sn.stop)
	sn.release()
	drain, cancel := context.WithTimeout(context.Background(), sn.o.closeTimeout)
	defer cancel()
	if err := sn.sched.Shutdown(drain); err != nil {
		sn.log.Error("Close timeout: gave up on messages in the handler", err, nil)
		// Given up: every task's ctx is done, so each returns at once;
		// this waits for their goroutines.
		_ = sn.sched.Shutdown(context.Background())
	}
}

// dispatch takes messages from the wrapped subscriber until it closes its
// channel, ctx ends or Close is called.
func (sn *subscription) dispatch(ctx context.Context) {
	for {
		var msg *message.Message
		var ok bool
		select {
		case msg, ok = <-sn.in:
			if !ok {
				return
			}
		case <-ctx.Done():
			return
		case <-sn.s.closing:
			return
		}
		key := sn.key(msg)
		if !sn.gate.admit(ctx, sn.s.closing, key) {
			return // msg stays un-acked: the wrapped subscriber redelivers it
		}
		prio := seqsched.Normal
		if p := sn.o.priority; p != "" && strings.EqualFold(msg.Metadata.Get(p), "high") {
			prio = seqsched.High
		}
		if sn.o.ackOnReceive {
			msg.Ack()
		}
		err := sn.sched.Post(context.Background(), key, func(tctx context.Context) error {
			return sn.task(tctx, key, msg) // msg is this iteration's: declared in the loop
		}, prio)
		if err != nil { // only this goroutine shuts the scheduler down: cannot happen
			sn.gate.done(key)
			sn.log.Error("Cannot queue message", err, fieldsOf(key, msg))
		}
	}
}

// key returns msg's key, "" when the KeyFunc panics. A KeyFunc that calls
// runtime.Goexit ends the dispatch goroutine: that is logged, and run ends
// the subscription.
func (sn *subscription) key(msg *message.Message) (key string) {
	normal := false
	defer func() {
		if normal {
			return
		}
		if r := recover(); r != nil {
			sn.log.Error("KeyFunc panicked; message ordered under the empty key",
				&seqsched.PanicError{Value: r, Stack: debug.Stack()}, watermill.LogFields{"message_uuid": msg.UUID})
			key = ""
			return
		}
		sn.log.Error("KeyFunc called runtime.Goexit; the subscription ends", seqsched.ErrGoexit,
			watermill.LogFields{"message_uuid": msg.UUID})
	}()
	key = sn.o.key(msg)
	normal = true
	return key
}

// handle sends copies of msg on out until one is acked, and settles msg;
// it reports whether msg halts its key instead (WithHaltOnNack: nacked on
// its last attempt, and left unsettled). Each copy has a ctx of its own,
// canceled once the copy is acked or nacked, as watermill's subscribers
// do; it ends with msg's unless ackOnReceive (msg was acked, and its ctx
// may be over).
func (sn *subscription) handle(ctx context.Context, key string, msg *message.Message) (halt bool) {
	// gone is closed when the wrapped subscriber gave msg up (its Close, or
	// its Subscribe ctx ended): an Ack would be lost, so nothing waits for one.
	var gone <-chan struct{}
	parent := msg.Context()
	if sn.o.ackOnReceive {
		parent = context.WithoutCancel(parent)
	} else {
		gone = parent.Done()
	}
	for attempt := 1; ; attempt++ {
		if !sn.o.ackOnReceive {
			select {
			case <-sn.stop:
				return false // not sent: left un-acked, for the wrapped subscriber to redeliver
			default:
			}
		}
		c := msg.Copy()
		cctx, cancel := context.WithCancel(parent)
		c.SetContext(cctx)
		acked, err := sn.deliver(ctx, c, gone)
		cancel()
		switch {
		case err != nil:
			sn.lost(msg, fieldsOf(key, msg), err.Error())
			return false
		case acked:
			msg.Ack()
			return false
		}
		if a := sn.o.attempts; a > 0 && attempt >= a {
			switch {
			case sn.o.haltOnNack:
				return true
			case sn.o.ackOnReceive:
				sn.log.Error("Message dropped after its last attempt", nil, fieldsOf(key, msg).Add(watermill.LogFields{"attempts": attempt}))
			default:
				msg.Nack()
			}
			return false
		}
		wait := sn.o.backoff(attempt)
		sn.log.Info("Message nacked, retrying in place", fieldsOf(key, msg).Add(watermill.LogFields{"attempt": attempt, "backoff": wait}))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			sn.lost(msg, fieldsOf(key, msg), "in backoff at the close timeout")
			return false
		case <-sn.abandon():
			t.Stop()
			return false
		case <-gone:
			t.Stop()
			return false
		}
	}
}

// Reasons deliver gives up on a copy.
var (
	errGaveUp = errors.New("not settled before the close timeout")
	errGone   = errors.New("given up by the wrapped subscriber")
)

// deliver sends c on out and waits for its Ack (true) or Nack (false). It
// gives up when ctx ends (the close timeout), when gone is closed, and,
// before c is sent, when the subscription ends (see abandon).
func (sn *subscription) deliver(ctx context.Context, c *message.Message, gone <-chan struct{}) (bool, error) {
	select {
	case sn.out <- c:
	case <-ctx.Done():
		return false, errGaveUp
	case <-gone:
		return false, errGone
	case <-sn.abandon():
		return false, errGone
	}
	select {
	case <-c.Acked():
		return true, nil
	case <-c.Nacked():
		return false, nil
	case <-ctx.Done():
		return false, errGaveUp
	case <-gone:
		return false, errGone
	}
}

// abandon is closed when a message not yet in the handler must not be
// sent: when the subscription ends, except with ackOnReceive (the message
// was acked, so it is handled until the close timeout).
func (sn *subscription) abandon() <-chan struct{} {
	if sn.o.ackOnReceive {
		return nil
	}
	return sn.stop
}

// lost reports a message given up: with ackOnReceive it was acked and is
// lost (Error); otherwise it is left un-acked, for the wrapped subscriber.
func (sn *subscription) lost(msg *message.Message, fields watermill.LogFields, why string) {
	if sn.o.ackOnReceive {
		sn.log.Error("Acked message dropped: "+why, nil, fields)
	} else {
		sn.log.Debug("Message left un-acked: "+why, fields)
	}
}

// unrun is the scheduler's error handler. Tasks return nil, so it sees
// tasks that never ran (dropped when Shutdown gave up), and tasks that a
// panic or runtime.Goexit of user code (a backoff, a logger) or of this
// package's own ended, whose messages task's deferred function failed.
func (sn *subscription) unrun(_ context.Context, key string, err error) {
	if _, ok := err.(*seqsched.PanicError); ok || err == seqsched.ErrGoexit {
		if sn.o.ackOnReceive {
			sn.log.Error("Acked message dropped: its task panicked or called runtime.Goexit", err, watermill.LogFields{"key": key})
		} else {
			sn.log.Error("Message nacked: its task panicked or called runtime.Goexit", err, watermill.LogFields{"key": key})
		}
		return
	}
	if sn.o.ackOnReceive {
		sn.log.Error("Acked message dropped at close", err, watermill.LogFields{"key": key})
		return
	}
	sn.log.Debug("Message left un-acked at close", watermill.LogFields{"key": key, "err": err})
}

// gate bounds the messages a subscription holds, in all and per key. Only
// the dispatch goroutine waits in admit, so one wake slot (buffered, so a
// done between admit's check and its wait is not lost) is enough.
type gate struct {
	maxHeld, maxPerKey int

	mu     sync.Mutex
	held   int
	perKey map[string]int // keys with messages held; a key is deleted at 0
	wake   chan struct{}
}

// admit counts a message of key in, waiting while a bound is reached. It
// returns false if ctx ends or closing is closed first.
func (g *gate) admit(ctx context.Context, closing <-chan struct{}, key string) bool {
	for {
		g.mu.Lock()
		if g.held < g.maxHeld && (g.maxPerKey == 0 || g.perKey[key] < g.maxPerKey) {
			g.held++
			g.perKey[key]++
			g.mu.Unlock()
			return true
		}
		g.mu.Unlock()
		select {
		case <-g.wake:
		case <-ctx.Done():
			return false
		case <-closing:
			return false
		}
	}
}

// done counts a message of key out, and wakes admit.
func (g *gate) done(key string) {
	g.mu.Lock()
	g.held--
	if g.perKey[key]--; g.perKey[key] == 0 {
		delete(g.perKey, key)
	}
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}
