package seqkafka

import (
	"cmp"
	"slices"

	"github.com/seqsched/seqsched"
	"github.com/seqsched/seqsched/internal/histogram"
)

// Stats is a snapshot of a consumer, from Consumer.Stats: plain data, for
// an exporter to read at scrape time. The counters (uint64 fields and the
// histograms) only grow over the consumer's life; the rest are gauges.
// Recording them costs a few atomic adds and two clock reads per handler
// call, nothing more.
type Stats struct {
	Paused       bool   // Pause was called and Resume not since
	Buffered     int    // records fetched and not done, all partitions (the sum of Partitions' Buffered)
	InFlight     int    // of Buffered, records in a handler call now (a batch counts its records)
	Processed    uint64 // records handled successfully
	Retries      uint64 // failed attempts that were retried
	DeadLettered uint64 // records that went through the dead-letter step
	Skipped      uint64 // records skipped because the commit metadata said they were done
	Commits      uint64 // offset commits that succeeded
	CommitErrors uint64 // offset commits that failed (some partition not committed)

	// HandlerTime counts the duration of each handler call (each batch
	// call, with NewBatchConsumer), in seqsched.HistogramBounds' buckets.
	HandlerTime seqsched.Histogram
	// QueueTime counts, for each record, the time from its fetch to the
	// start of its first handler call: waiting for its key's earlier
	// records, for a concurrency slot, for its batch to be handed over.
	QueueTime seqsched.Histogram

	Partitions []PartitionStats // assigned partitions, by topic and partition
}

// PartitionStats describes one assigned partition. Its counters cover
// every assignment of the partition to this consumer.
type PartitionStats struct {
	Topic     string
	Partition int32
	Paused    bool  // taking no records: its buffer is full (see WithMaxBuffered), or the consumer is paused
	Committed int64 // last offset committed (or found committed at assignment); -1 none
	Watermark int64 // offset a commit would carry now: every record below it is done; -1 before the first fetch

	// HighWatermark is the partition's end offset at the last fetch; -1
	// before one. Lag is HighWatermark - Watermark (0 while either is
	// unknown): the records not known to be done, those fetched and not
	// done and those not fetched yet, as a restart now would see them
	// (less what the commit metadata lists done).
	HighWatermark int64
	Lag           int64

	Buffered     int    // records fetched and not done
	InFlight     int    // of Buffered, records in a handler call now
	Processed    uint64 // records handled successfully
	Retries      uint64 // failed attempts that were retried
	DeadLettered uint64 // records that went through the dead-letter step
	Skipped      uint64 // records skipped because the commit metadata said they were done
}

// Stats returns a snapshot of the consumer. It is exact when the consumer
// is quiet and approximate while records move. Safe for concurrent use,
// also after Close; it never waits for a handler.
func (c *Consumer) Stats() Stats {
	s := Stats{
		Paused:       c.paused.Load(),
		Commits:      c.commits.Load(),
		CommitErrors: c.commitErrors.Load(),
		HandlerTime:  snapshot(&c.handlerTime),
		QueueTime:    snapshot(&c.queueTime),
	}
	c.mu.Lock()
	for _, n := range c.counts {
		s.Processed += n.processed.Load()
		s.Retries += n.retries.Load()
		s.DeadLettered += n.deadLettered.Load()
		s.Skipped += n.skipped.Load()
		s.InFlight += int(n.inFlight.Load())
	}
	ps := make([]*partition, 0, len(c.parts))
	for _, p := range c.parts {
		ps = append(ps, p)
	}
	c.mu.Unlock()
	for _, p := range ps {
		n := p.counts
		st := PartitionStats{
			Topic: p.topic, Partition: p.part,
			InFlight:     int(n.inFlight.Load()),
			Processed:    n.processed.Load(),
			Retries:      n.retries.Load(),
			DeadLettered: n.deadLettered.Load(),
			Skipped:      n.skipped.Load(),
		}
		p.mu.Lock()
		st.Paused = s.Paused || p.win.stopped || p.win.behind()
		st.Committed = p.committed
		st.Watermark = p.watermark()
		st.HighWatermark = p.hwm
		st.Buffered = p.win.buffered()
		p.mu.Unlock()
		if st.HighWatermark >= 0 && st.Watermark >= 0 {
			st.Lag = max(0, st.HighWatermark-st.Watermark)
		}
		s.Buffered += st.Buffered
		s.Partitions = append(s.Partitions, st)
	}
	slices.SortFunc(s.Partitions, func(a, b PartitionStats) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return s
}

// snapshot returns r's counts as a seqsched.Histogram.
func snapshot(r *histogram.Recorder) seqsched.Histogram {
	var h seqsched.Histogram
	h.Count, h.Sum, h.Buckets = r.Snapshot()
	return h
}
