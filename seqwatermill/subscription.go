package seqwatermill

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/seqsched/seqsched"
)

// A subscription is one Subscribe: one dispatch goroutine (run) reads the
// wrapped subscriber's channel and posts each message as a task on its
// key's session of a seqsched scheduler; the task sends a copy on out,
// waits for the consumer's Ack or Nack, and settles the wrapped message
// (handle.go). The scheduler gives the order per key and the parallelism
// across keys; the gate bounds what is held; byID finds a held message by
// its redelivery (redelivery.go); halts holds the keys WithHaltOnNack
// halted (halt.go). How it ends: run stops reading, ends life (stop is
// closed: queued messages not yet sent are skipped, unless ackOnReceive,
// and with ackOnReceive the handler's copies have their ctx canceled),
// releases the halted keys (their messages are given up), drains the
// scheduler within closeTimeout (then gives up: the tasks' ctx ends),
// reports what it never handed over, and only then closes out, so no task
// can send on a closed channel.
type subscription struct {
	s       *Subscriber
	o       *options
	topic   string
	in      <-chan *message.Message
	out     chan *message.Message
	life    context.Context // canceled when the subscription begins to end
	endLife context.CancelFunc
	stop    <-chan struct{} // life.Done()
	gate    gate
	halts   halts
	sched   *seqsched.Scheduler[string]
	log     watermill.LoggerAdapter
	noKey   atomic.Bool // a message without the key metadata was logged
	st      *counters   // the Subscriber's

	mu   sync.Mutex
	all  map[*held]struct{} // every message held, until settled or given up
	byID map[heldID]*held   // of those, the ones a redelivery replaces (redelivery.go)

	handled handled // messages acked lately, to ack their redeliveries
}

func newSubscription(s *Subscriber, topic string, in <-chan *message.Message) (*subscription, error) {
	sn := &subscription{
		s: s, o: &s.opts, topic: topic, in: in,
		out: make(chan *message.Message),
		gate: gate{maxHeld: s.opts.maxBuffered, maxPerKey: s.opts.maxPerKey,
			perKey: map[string]int{}, wake: make(chan struct{}, 1)},
		log:  guardedLogger{s.opts.logger}.With(watermill.LogFields{"topic": topic}),
		st:   &s.st,
		all:  map[*held]struct{}{},
		byID: map[heldID]*held{},
	}
	sn.handled.set = map[[16]byte]struct{}{}
	sn.handled.ring = make([][16]byte, 0, s.opts.maxBuffered)
	sn.life, sn.endLife = context.WithCancel(context.Background())
	sn.stop = sn.life.Done()
	sched, err := seqsched.New[string](
		seqsched.WithMaxConcurrency(s.opts.maxConc),
		seqsched.WithErrorHandler(sn.unrun),
		seqsched.WithLogger(slog.New(slog.DiscardHandler)), // every failure reaches unrun
	)
	if err != nil {
		sn.endLife()
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
	sn.endLife()
	sn.s.wg.Add(1) // Close waits for it; run's own count keeps the group above 0
	go func() {
		defer sn.s.wg.Done()
		sn.drainIn()
	}()
	sn.release()
	drain, cancel := context.WithTimeout(context.Background(), sn.o.closeTimeout)
	defer cancel()
	if err := sn.sched.Shutdown(drain); err != nil {
		sn.log.Error("Close timeout: gave up on messages in the handler", err, nil)
		// Given up: every task's ctx is done, so each returns at once;
		// this waits for their goroutines.
		_ = sn.sched.Shutdown(context.Background())
	}
	// What is left was queued and never handed over: the forced Shutdown
	// dropped its task.
	sn.mu.Lock()
	left := make([]*held, 0, len(sn.all))
	for h := range sn.all {
		left = append(left, h)
	}
	sn.mu.Unlock()
	for _, h := range left {
		sn.lost(h, h.msg, "never handed over before the close timeout")
		sn.done(h)
	}
}

// drainIn reads what the wrapped subscriber still sends once the
// subscription ends, as a plain Router reads its channel until it closes,
// and leaves it un-acked, for the subscriber to redeliver. A subscriber
// blocked in a send while it closes its channel can fail (watermill-nats
// sends and closes from two goroutines); one that never closes it after
// Close is left WithCloseTimeout after Close began.
func (sn *subscription) drainIn() {
	var timeout <-chan time.Time
	closing := sn.s.closing
	for {
		select {
		case _, ok := <-sn.in:
			if !ok {
				return
			}
		case <-closing:
			closing = nil
			t := time.NewTimer(sn.o.closeTimeout)
			defer t.Stop()
			timeout = t.C
		case <-timeout:
			return
		}
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
		sn.st.received.Add(1)
		key := sn.key(msg)
		okey := orderKey(key)
		if sn.redelivered(okey, msg) || sn.duplicate(key, okey, msg) {
			continue // it took the place of its earlier copy, or was handled already
		}
		if !sn.gate.admit(ctx, sn.s.closing, okey) {
			return // msg stays un-acked: the wrapped subscriber redelivers it
		}
		prio := seqsched.Normal
		if p := sn.o.priority; p != "" && strings.EqualFold(msg.Metadata.Get(p), "high") {
			prio = seqsched.High
		}
		if sn.o.ackOnReceive {
			msg.Ack()
			sn.st.acked.Add(1)
		}
		h := newHeld(key, okey, msg)
		sn.mu.Lock()
		sn.all[h] = struct{}{}
		sn.mu.Unlock()
		sn.track(h)
		err := sn.sched.Post(context.Background(), okey, func(tctx context.Context) error {
			return sn.task(tctx, okey, h)
		}, prio)
		if err != nil { // only this goroutine shuts the scheduler down: cannot happen
			sn.done(h)
			sn.log.Error("Cannot queue message", err, fieldsOf(key, msg))
		}
	}
}

// done counts h out: settled, or given up.
func (sn *subscription) done(h *held) {
	sn.mu.Lock()
	_, in := sn.all[h]
	delete(sn.all, h)
	if h.found {
		delete(sn.byID, h.id)
		h.found = false
	}
	sn.mu.Unlock()
	if in {
		sn.gate.done(h.id.key)
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
				&seqsched.PanicError{Value: r, Stack: debug.Stack()}, watermill.LogFields{"message_uuid": quoteID(msg)})
			key = ""
			return
		}
		sn.log.Error("KeyFunc called runtime.Goexit; the subscription ends", seqsched.ErrGoexit,
			watermill.LogFields{"message_uuid": quoteID(msg)})
	}()
	if name := sn.o.keyMetadata; name != "" {
		key, ok := msg.Metadata[name]
		if !ok && sn.noKey.CompareAndSwap(false, true) {
			sn.log.Error("A message has no key metadata: it and every other one without it are ordered together, one at a time (logged once)",
				ErrNoKey, watermill.LogFields{"message_uuid": quoteID(msg), "metadata": name})
		}
		normal = true
		return key
	}
	key = sn.o.key(msg)
	normal = true
	return key
}

// unrun is the scheduler's error handler. Tasks return nil, so it sees
// tasks that a panic or runtime.Goexit of user code (a backoff, a logger,
// an interceptor) or of this package's own ended, whose messages task's
// deferred function failed, and tasks that never ran (dropped when
// Shutdown gave up), whose messages end reports.
func (sn *subscription) unrun(_ context.Context, key string, err error) {
	if _, ok := err.(*seqsched.PanicError); ok || err == seqsched.ErrGoexit {
		if sn.o.ackOnReceive {
			sn.log.Error("Task of acked messages panicked or called runtime.Goexit", err, nil)
		} else {
			sn.log.Error("Message nacked: its task panicked or called runtime.Goexit", err, nil)
		}
	}
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

// count returns how many messages of key are counted in.
func (g *gate) count(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.perKey[key]
}
