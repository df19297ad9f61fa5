package seqwatermill

import (
	"sync/atomic"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/internal/histogram"
)

// Stats is a snapshot of a Subscriber, from [Subscriber.Stats]: plain data
// for metrics, with seqkafka's and seqjetstream's names where they mean
// the same. Counters only grow and count every subscription of the
// Subscriber; gauges (Buffered, Halted) are the state at the snapshot.
type Stats struct {
	Received    uint64 // messages taken from the wrapped subscriber, redeliveries included
	Acked       uint64 // subscriber's messages acked after the consumer acked a copy (with WithAckOnReceive: on receipt)
	Nacked      uint64 // subscriber's messages nacked: after their last attempt, or their task failed
	Retries     uint64 // nacked attempts retried in place
	GivenUp     uint64 // messages the wrapped subscriber gave up before they were settled (each logged with ErrGivenUp)
	Redelivered uint64 // redeliveries that took the place of a message given up
	Duplicates  uint64 // redeliveries of a message acked lately: acked, not handled again
	Dropped     uint64 // with WithAckOnReceive: acked messages lost (each logged at Error)
	Halts       uint64 // keys halted by WithHaltOnNack

	Buffered int // messages held: queued, in the handler, waiting for a retry, or halted
	Halted   int // keys halted now

	// HandlerTime counts the duration of each hand-over (each attempt):
	// from sending the copy to its Ack or Nack, in
	// seqsched.HistogramBounds' buckets.
	HandlerTime seqsched.Histogram
	// QueueTime counts, for each message, the time from its receipt to the
	// start of its key's turn for it: waiting for its key's earlier
	// messages and for a concurrency slot.
	QueueTime seqsched.Histogram
}

// counters are a Subscriber's Stats counters, shared by its subscriptions.
type counters struct {
	received, acked, nacked, retries, givenUp, redelivered, duplicates, dropped, halts atomic.Uint64
	handlerTime, queueTime                                                             histogram.Recorder
}

// Stats returns a snapshot of s's counters. It is exact when s is quiet and
// approximate while messages move. It never waits, and is safe for
// concurrent use, also after Close.
func (s *Subscriber) Stats() Stats {
	c := &s.st
	st := Stats{
		Received: c.received.Load(), Acked: c.acked.Load(), Nacked: c.nacked.Load(),
		Retries: c.retries.Load(), GivenUp: c.givenUp.Load(), Redelivered: c.redelivered.Load(), Duplicates: c.duplicates.Load(),
		Dropped: c.dropped.Load(), Halts: c.halts.Load(),
		HandlerTime: snapshot(&c.handlerTime), QueueTime: snapshot(&c.queueTime),
	}
	s.mu.Lock()
	subs := make([]*subscription, 0, len(s.subs))
	for sn := range s.subs {
		subs = append(subs, sn)
	}
	s.mu.Unlock()
	for _, sn := range subs {
		sn.gate.mu.Lock()
		st.Buffered += sn.gate.held
		sn.gate.mu.Unlock()
		st.Halted += len(sn.halted())
	}
	return st
}

// snapshot returns r's counts as a seqsched.Histogram.
func snapshot(r *histogram.Recorder) seqsched.Histogram {
	var h seqsched.Histogram
	h.Count, h.Sum, h.Buckets = r.Snapshot()
	return h
}
