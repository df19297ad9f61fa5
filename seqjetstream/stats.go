package seqjetstream

import (
	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/internal/histogram"
)

// Stats is a snapshot of a Consumer, from Consumer.Stats: plain data for
// metrics. Counters only grow; gauges (InFlight, Buffered, Waiting,
// Remembered, Owned, CatchingUp) are the state at the snapshot. The
// totals are the sums of Consumers'.
type Stats struct {
	Received     uint64 // deliveries taken from JetStream, redeliveries included
	Acked        uint64 // messages acknowledged after their handler returned nil
	Duplicates   uint64 // redeliveries of a message still held or already resolved here (by its sequence, or on a pinned consumer by its key's): not handled again
	Retries      uint64 // failed attempts retried in place
	Termed       uint64 // messages terminated after a terminal error or their last attempt
	DeadLettered uint64 // of Termed, those that went through the dead-letter step (WithDeadLetter)
	GivenBack    uint64 // messages given back (Nak) for redelivery: by Close, or delivered while closing
	Dropped      uint64 // messages left unanswered, for JetStream to redeliver: their partition was lost, Close had ended, or (pinned) the answer came past the message's answer window (see the package doc)
	Heartbeats   uint64 // InProgress signals sent for held messages
	// CatchUpsAbandoned counts catch-ups given up after waiting too long
	// for messages the server counts as unacknowledged that never came
	// (logged at Error; see the package doc). Each may have cost order.
	CatchUpsAbandoned uint64
	// CatchUpsStartedOver counts catch-ups that waited their bound for
	// messages the server counts as unacknowledged, not all of which can
	// be stored status messages, and started over: what they held was
	// given back, and the partition waited on, in order (logged at Warn,
	// and at Error from a catch-up's third start-over on; see the package
	// doc). Each costs the partition a catch-up's bound, never order.
	CatchUpsStartedOver uint64
	InFlight            int // messages in progress: running their handler, waiting to retry, or being dead-lettered
	Buffered            int // messages held: delivered and not yet acked, terminated, given back or dropped

	// HandlerTime counts the duration of each handler call (each
	// attempt), in seqsched.HistogramBounds' buckets.
	HandlerTime seqsched.Histogram
	// QueueTime counts, for each message, the time from its delivery to
	// the start of its first handler call: waiting for its key's earlier
	// messages, for a catch-up, for a concurrency slot.
	QueueTime seqsched.Histogram

	Consumers []ConsumerStats // one per JetStream consumer, in NewConsumer's order
}

// ConsumerStats describes one JetStream consumer (a partition, when
// pinned) of a Consumer.
type ConsumerStats struct {
	Stream   string
	Consumer string
	Pinned   bool // pinned priority policy: a partition this instance may own
	// Owned is true while this instance may handle the consumer's
	// messages: always for a plain consumer; for a pinned one, while it
	// holds the pin.
	Owned bool
	// CatchingUp is true after this instance took the pin over, while it
	// holds messages back until the previous owner's unacknowledged ones
	// are back, and after a delivery to it was lost on its way, until
	// that one is back (see the package doc).
	CatchingUp bool
	// Assigned is false while WithBalance assigns the consumer to another
	// instance (this one does not pull from it then); true otherwise.
	Assigned bool

	Received, Acked, Duplicates, Retries, Termed, DeadLettered uint64
	GivenBack, Dropped, Heartbeats, CatchUpsAbandoned          uint64
	CatchUpsStartedOver                                        uint64

	InFlight   int // as Stats.InFlight, for this consumer
	Buffered   int // as Stats.Buffered, for this consumer; at most its MaxAckPending
	Waiting    int // of Buffered, messages held back by a catch-up
	Remembered int // resolved messages remembered to recognise their redeliveries (bounded)
}

// Stats returns a snapshot of the consumer's counters. It is exact when
// the consumer is quiet and approximate while messages move. Safe for
// concurrent use, also after Close.
func (c *Consumer) Stats() Stats {
	s := Stats{
		HandlerTime: snapshot(&c.handlerTime),
		QueueTime:   snapshot(&c.queueTime),
		Consumers:   make([]ConsumerStats, 0, len(c.parts)),
	}
	for _, p := range c.parts {
		cs := ConsumerStats{
			Stream: p.stream, Consumer: p.name, Pinned: p.group != "",
			Received:            p.st.received.Load(),
			Acked:               p.st.acked.Load(),
			Duplicates:          p.st.duplicates.Load(),
			Retries:             p.st.retries.Load(),
			Termed:              p.st.termed.Load(),
			DeadLettered:        p.st.deadLettered.Load(),
			GivenBack:           p.st.givenBack.Load(),
			Dropped:             p.st.dropped.Load(),
			Heartbeats:          p.st.heartbeats.Load(),
			CatchUpsAbandoned:   p.st.catchUpsAbandoned.Load(),
			CatchUpsStartedOver: p.st.catchUpsStartedOver.Load(),
			InFlight:            int(p.inflight.Load()),
		}
		p.mu.Lock()
		cs.Owned, cs.CatchingUp, cs.Assigned = p.owned, p.catchUp, p.assigned
		cs.Buffered, cs.Waiting = len(p.held), len(p.waiting)
		cs.Remembered = p.resolved.len()
		p.mu.Unlock()
		s.Consumers = append(s.Consumers, cs)

		s.Received += cs.Received
		s.Acked += cs.Acked
		s.Duplicates += cs.Duplicates
		s.Retries += cs.Retries
		s.Termed += cs.Termed
		s.DeadLettered += cs.DeadLettered
		s.GivenBack += cs.GivenBack
		s.Dropped += cs.Dropped
		s.Heartbeats += cs.Heartbeats
		s.CatchUpsAbandoned += cs.CatchUpsAbandoned
		s.CatchUpsStartedOver += cs.CatchUpsStartedOver
		s.InFlight += cs.InFlight
		s.Buffered += cs.Buffered
	}
	return s
}

// snapshot returns r's counts as a seqsched.Histogram.
func snapshot(r *histogram.Recorder) seqsched.Histogram {
	var h seqsched.Histogram
	h.Count, h.Sum, h.Buckets = r.Snapshot()
	return h
}
