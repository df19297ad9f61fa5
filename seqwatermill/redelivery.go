package seqwatermill

import (
	"crypto/sha256"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Redelivery. A subscriber may give a message up before it is settled and
// send it again later: watermill-nats does, AckWaitTimeout after sending
// it (it cancels the message's ctx and sends the next), and the broker
// redelivers it after the consumer's AckWait. A key must not go on while
// one of its messages is unfinished, so every message the subscription
// holds is a held record, found by its key and UUID, and a redelivery of
// a message given up takes that message's place (redelivered) instead of
// queueing behind the key's later messages as a new one. The message's
// turn hands over the newest copy (newest); one given up is handed over
// with a ctx of the subscription's own, never the dead one. Acked
// messages are remembered (handled), so that a redelivery that comes
// after all is acked without being handled again.
//
// With WithAckOnReceive the subscriber's message was acked on receipt and
// is never given up: nothing is found by UUID.

// held is a message the subscription holds, from its admission until it is
// settled or given up. msg and next are guarded by subscription.mu.
type held struct {
	key      string    // as the message carries it, for logs and Controller.Halted
	received time.Time // when the subscription took it, for Stats.QueueTime
	id       heldID
	msg      *message.Message // the subscriber's newest copy
	next     *message.Message // a redelivery not yet taken by newest
	replaced bool             // a redelivery took the place of a copy
	settled  bool             // acked: a redelivery is a duplicate now
	found    bool             // in subscription.byID
	logged   bool             // its give-up was logged (by its turn's goroutine only)
}

// heldID finds a held message: its order key and UUID.
type heldID struct{ key, uuid string }

func newHeld(key, okey string, msg *message.Message) *held {
	return &held{key: key, received: time.Now(), id: heldID{okey, msg.UUID}, msg: msg}
}

// given reports whether the subscriber gave msg up: its ctx ended. (With
// WithAckOnReceive it was acked on receipt, and nothing depends on it.)
func (sn *subscription) given(msg *message.Message) bool {
	return !sn.o.ackOnReceive && msg.Context().Err() != nil
}

// track makes h findable by its redelivery. A second message with the UUID
// of one still held is not: it is handled in its own turn.
func (sn *subscription) track(h *held) {
	if sn.o.ackOnReceive {
		return
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if _, dup := sn.byID[h.id]; !dup {
		sn.byID[h.id] = h
		h.found = true
	}
}

// redelivered reports whether msg is the redelivery of a held message that
// the subscriber gave up, and if so puts it in that message's place. A
// copy that replaces a redelivery given up in turn leaves that one
// un-acked, as the subscriber left it.
func (sn *subscription) redelivered(okey string, msg *message.Message) bool {
	if sn.o.ackOnReceive {
		return false
	}
	sn.mu.Lock()
	h := sn.byID[heldID{okey, msg.UUID}]
	if h == nil || h.settled || !sn.given(h.msg) || (h.next != nil && !sn.given(h.next)) {
		sn.mu.Unlock()
		return false // not held, or held with a live copy: a message of its own
	}
	h.next, h.replaced = msg, true
	sn.mu.Unlock()
	sn.st.redelivered.Add(1)
	sn.log.Info("Redelivery of a message given up takes its place", fieldsOf(h.key, msg))
	return true
}

// ErrGivenUp is the error of the record logged at Error when the wrapped
// subscriber gives a message up before it was settled (watermill-nats does
// AckWaitTimeout after sending it): the message's key still waits until
// the handler acked it (handed over again with a ctx of the decorator's
// own), and the subscriber's redelivery of it is then acked without being
// handled again. The record's fields hold the key and the message's UUID,
// quoted.
var ErrGivenUp = errors.New("seqwatermill: message given up by the subscriber before it was settled")

// newest returns the newest copy of h's message the subscriber sent.
func (sn *subscription) newest(h *held) *message.Message {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if h.next != nil {
		h.msg, h.next = h.next, nil
	}
	return h.msg
}

// givenUp logs, once per message, that the subscriber gave h's message up.
func (sn *subscription) givenUp(h *held, msg *message.Message) {
	if h.logged {
		return
	}
	h.logged = true
	if sn.ending() {
		return // the subscription ends: every message's ctx does (see Subscriber.Close)
	}
	sn.st.givenUp.Add(1)
	sn.log.Error("Message given up by the subscriber before it was settled; its key waits until it is handled, and its redelivery will be acked",
		ErrGivenUp, fieldsOf(h.key, msg))
}

// handled remembers the messages acked lately that the subscriber had
// given up (see subscription.ack), by a hash of their order key and UUID,
// so that a redelivery of one still on its way is acked without being
// handled again. It remembers the last WithMaxBuffered ones: 16 bytes
// each, whatever the keys and UUIDs a publisher chose.
type handled struct {
	mu   sync.Mutex
	set  map[[16]byte]struct{}
	ring [][16]byte // the remembered, oldest at next once full
	next int
}

func idOf(okey, uuid string) (id [16]byte) {
	h := sha256.New()
	h.Write([]byte(okey))
	h.Write([]byte{0})
	h.Write([]byte(uuid))
	copy(id[:], h.Sum(nil))
	return id
}

// add remembers id, forgetting the oldest beyond the capacity.
func (r *handled) add(id [16]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.set[id]; ok {
		return
	}
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, id)
	} else {
		delete(r.set, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % len(r.ring)
	}
	r.set[id] = struct{}{}
}

// empty reports whether nothing is remembered: the common case, checked
// before hashing a message's key and UUID.
func (r *handled) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.set) == 0
}

func (r *handled) has(id [16]byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.set[id]
	return ok
}

// duplicate reports whether msg of okey was acked lately, and if so acks
// it: it is a redelivery of a message handled already.
func (sn *subscription) duplicate(key, okey string, msg *message.Message) bool {
	if sn.o.ackOnReceive || sn.handled.empty() || !sn.handled.has(idOf(okey, msg.UUID)) {
		return false
	}
	msg.Ack()
	sn.st.duplicates.Add(1)
	sn.log.Info("Redelivery of a message acked already: acked, not handled again", fieldsOf(key, msg))
	return true
}
