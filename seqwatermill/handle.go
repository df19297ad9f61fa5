package seqwatermill

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/seqsched/seqsched/internal/logkey"
)

// A message's turn. Its key's task (task) hands the key's held messages
// and then its own to handle, in order; handle sends a copy on out, waits
// for the consumer's Ack or Nack, retries in place, and settles the
// subscriber's message. Whatever the subscriber does, the key does not go
// on while the message is unfinished: a copy in the handler is waited for
// even after the subscriber gave the message up (a second message of the
// key must not reach the handler while it runs); a message given up is
// handed over again with a ctx of the subscription's own (never a dead
// one), and once acked, its redelivery is acked without being handled
// again (redelivery.go).

// task is the task of message m of key or, with m nil, the one a halt
// posts: it handles the key's held messages, then m, in order, and counts
// each out once it is settled (or given up). If one halts the key again,
// it and those after it are held, still counted in.
func (sn *subscription) task(ctx context.Context, key string, m *held) error {
	msgs, released := sn.take(key)
	if m != nil {
		msgs = append(msgs, m)
		sn.st.queueTime.Observe(time.Since(m.received))
	}
	settled := 0
	defer func() { // only when a backoff, interceptor or logger panicked, or called runtime.Goexit
		for ; settled < len(msgs); settled++ {
			h := msgs[settled]
			if sn.o.ackOnReceive {
				sn.st.dropped.Add(1)
				sn.log.Error("Acked message dropped: its task panicked or called runtime.Goexit", nil, fieldsOf(h.key, h.msg))
			} else {
				h.msg.Nack() // failed: for the subscriber to redeliver (unrun logs why)
				sn.st.nacked.Add(1)
			}
			sn.done(h)
		}
	}()
	for i, h := range msgs {
		switch {
		case released:
			sn.lost(h, h.msg, "its key was halted at close")
		case sn.handle(ctx, h):
			if sn.hold(key, msgs[i:]) {
				settled = len(msgs)
				sn.st.halts.Add(1)
				sn.log.Error("Key halted: its message was nacked on its last attempt; Resume the key to hand it to the handler again",
					ErrHalted, fieldsOf(h.key, h.msg).Add(watermill.LogFields{"attempts": sn.o.attempts}))
				return nil
			}
			released = true // the subscription is ending: the key's messages go as a halted key's would
			sn.lost(h, h.msg, "its key was halted at close")
		}
		settled++
		sn.done(h)
	}
	return nil
}

// handle hands h's message to the consumer until a copy is acked, and
// settles the subscriber's message; it reports whether the message halts
// its key instead (WithHaltOnNack: nacked on its last attempt, and left
// unsettled).
func (sn *subscription) handle(ctx context.Context, h *held) (halt bool) {
	for attempt := 1; ; attempt++ {
		msg := sn.newest(h)
		if attempt == 1 && sn.duplicate(h.key, h.id.key, msg) {
			return false // a redelivery of one handled while this one was queued
		}
		if sn.given(msg) {
			sn.givenUp(h, msg)
		}
		acked, err := sn.attempt(ctx, msg, attempt)
		switch {
		case errors.Is(err, errRetake):
			attempt-- // given up as it was sent: hand it over again
			continue
		case err != nil:
			sn.lost(h, msg, err.Error())
			return false
		case acked:
			sn.ack(h, msg)
			return false
		}
		msg = sn.live(h, msg) // a redelivery that came meanwhile takes the Nack
		if a := sn.o.attempts; a > 0 && attempt >= a {
			switch {
			case sn.o.haltOnNack:
				return true
			case sn.o.ackOnReceive:
				sn.st.dropped.Add(1)
				sn.log.Error("Acked message dropped after its last attempt", nil, fieldsOf(h.key, msg).Add(watermill.LogFields{"attempts": attempt}))
			default:
				msg.Nack() // lost if msg was given up: the subscriber redelivers it anyway
				sn.st.nacked.Add(1)
			}
			return false
		}
		if sn.o.ackOnReceive && sn.ending() {
			// Close canceled the handler's ctx: retrying would hand the
			// message over again for the whole close timeout.
			sn.lost(h, msg, "nacked while the subscription ends")
			return false
		}
		sn.st.retries.Add(1)
		wait := sn.o.backoff(msg.Context(), msg, attempt, ErrNacked)
		sn.log.Info("Message nacked, retrying in place", fieldsOf(h.key, msg).Add(watermill.LogFields{"attempt": attempt, "backoff": wait}))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			sn.lost(h, msg, "in backoff at the close timeout")
			return false
		case <-sn.abandon():
			t.Stop()
			return false
		}
	}
}

// live returns the copy of h's message to settle, msg's or a newer one: a
// redelivery that arrived while msg was in the handler.
func (sn *subscription) live(h *held, msg *message.Message) *message.Message {
	if m := sn.newest(h); m != msg && !sn.given(m) {
		return m
	}
	return msg
}

// ack settles h's message after a copy of it, msg, was acked. If the
// subscriber gave msg up, the Ack goes to a redelivery that came meanwhile,
// or is lost: the subscriber sends the message again. A message with a
// give-up in its history is remembered, so that a redelivery still on its
// way is acked, not handled again (duplicate); one without is not, so that
// a message published again with the same UUID (a requeue) is handled.
func (sn *subscription) ack(h *held, msg *message.Message) {
	if sn.o.ackOnReceive {
		msg.Ack() // its copy: the subscriber's was acked on receipt
		return
	}
	// Under sn.mu, so that a redelivery that comes now either is taken
	// here or, h being settled, finds the message remembered (duplicate).
	sn.mu.Lock()
	if h.next != nil && !sn.given(h.next) {
		msg, h.next = h.next, nil
	}
	given := sn.given(msg)
	if given || h.logged || h.replaced {
		sn.handled.add(idOf(h.id.key, h.id.uuid))
	}
	h.settled = true
	sn.mu.Unlock()
	if given {
		sn.givenUp(h, msg)
		return
	}
	msg.Ack()
	sn.st.acked.Add(1)
}

// ErrNacked is the error a [BackoffFunc] is given, and an [Interceptor]'s
// next returns, when the consumer nacked the message: a watermill Nack
// carries no error of its own.
var ErrNacked = errors.New("seqwatermill: message nacked")

// Reasons attempt gives up on a copy.
var (
	errGaveUp = errors.New("not settled before the close timeout")
	errGone   = errors.New("the subscription ends")
	errRetake = errors.New("given up by the wrapped subscriber before it was handed over")
)

// attempt hands one copy of msg to the consumer, through the interceptors,
// and reports whether it was acked.
func (sn *subscription) attempt(ctx context.Context, msg *message.Message, n int) (acked bool, err error) {
	cctx, cancel := sn.copyContext(ctx, msg)
	defer cancel()
	cctx = withAttempt(cctx, n)
	start := time.Now()
	defer func() { sn.st.handlerTime.Observe(time.Since(start)) }()
	if len(sn.o.interceptors) == 0 {
		return sn.deliver(ctx, msg, cctx)
	}
	var failed error // attempt's own failure, not the consumer's Nack
	ierr := sn.o.chain(func(cctx context.Context, msg *message.Message) error {
		acked, err := sn.deliver(ctx, msg, cctx)
		switch {
		case err != nil:
			failed = err
			return err
		case !acked:
			return ErrNacked
		}
		return nil
	})(cctx, msg)
	if failed != nil {
		return false, failed
	}
	return ierr == nil, nil
}

// deliver sends a copy of msg with ctx cctx on out and waits for its Ack
// (true) or Nack (false). It gives up when ctx ends (the close timeout),
// before the copy is sent when the subscription ends (see abandon) or
// cctx ended (errRetake: the subscriber gave msg up meanwhile), and after
// it is sent when the subscription ends and cctx ended: otherwise it waits
// for the consumer, so that the key's next message never reaches the
// handler while this one is in it.
func (sn *subscription) deliver(ctx context.Context, msg *message.Message, cctx context.Context) (bool, error) {
	// Checked first, so that no select picks at random between sending
	// and giving up: a message is never sent once the subscription ends
	// (unless ackOnReceive), nor with a dead ctx.
	if !sn.o.ackOnReceive && sn.ending() {
		return false, errGone
	}
	if !sn.o.ackOnReceive && cctx.Err() != nil {
		return false, errRetake // msg given up since copyContext: a fresh ctx next time
	}
	var stop <-chan struct{}
	gone := cctx.Done()
	if sn.o.ackOnReceive {
		gone = nil
	}
	c := msg.Copy()
	c.SetContext(cctx)
	select {
	case sn.out <- c:
	case <-ctx.Done():
		return false, errGaveUp
	case <-sn.abandon():
		return false, errGone
	case <-gone:
		return false, errRetake
	}
	for {
		select {
		case <-c.Acked():
			return true, nil
		case <-c.Nacked():
			return false, nil
		case <-ctx.Done():
			return false, errGaveUp
		case <-gone:
			gone, stop = nil, sn.stop // the copy's ctx ended (msg given up): wait for the consumer
		case <-stop:
			return false, errGone
		}
	}
}

// copyContext returns the ctx of a copy of msg. It ends when the copy is
// settled, as watermill's subscribers end theirs, and with msg's (the
// subscriber gave msg up, or closed). When msg's ctx is over already (the
// subscriber gave it up, or, with ackOnReceive, acked it), the copy's
// carries msg's values and ends instead when the subscription begins to
// end (Close cancels the handler's ctx, as a subscriber's Close does), or,
// for a copy handed over after that (ackOnReceive), at the close timeout.
func (sn *subscription) copyContext(ctx context.Context, msg *message.Message) (context.Context, context.CancelFunc) {
	if !sn.o.ackOnReceive && !sn.given(msg) {
		return context.WithCancel(msg.Context())
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(msg.Context()))
	until := sn.life
	if sn.ending() {
		until = ctx
	}
	unhook := context.AfterFunc(until, cancel)
	return cctx, func() { unhook(); cancel() }
}

// ending reports whether the subscription has begun to end.
func (sn *subscription) ending() bool { return sn.life.Err() != nil }

// abandon is closed when a message not yet in the handler must not be
// sent: when the subscription ends, except with ackOnReceive (the message
// was acked, so it is handled until the close timeout).
func (sn *subscription) abandon() <-chan struct{} {
	if sn.o.ackOnReceive {
		return nil
	}
	return sn.stop
}

// lost reports h's message given up: with ackOnReceive it was acked and is
// lost (Error); otherwise it is left un-acked, for the wrapped subscriber.
func (sn *subscription) lost(h *held, msg *message.Message, why string) {
	if sn.o.ackOnReceive {
		sn.st.dropped.Add(1)
		sn.log.Error("Acked message dropped: "+why, nil, fieldsOf(h.key, msg))
	} else {
		sn.log.Debug("Message left un-acked: "+why, fieldsOf(h.key, msg))
	}
}

// quoteID returns msg's UUID for a log field: publishers choose it too.
func quoteID(msg *message.Message) string { return logkey.Quote(msg.UUID) }
