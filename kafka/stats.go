package kafka

import (
	"cmp"
	"runtime/debug"
	"slices"
)

// Stats is a snapshot of a consumer's state, from Consumer.Stats.
type Stats struct {
	InFlight     int    // records whose handler (or backoff, or dead-letter handler) is running now
	Queued       int    // records waiting for their key's turn or a concurrency slot
	Buffered     int    // records fetched and not yet done: InFlight + Queued, roughly
	Processed    uint64 // records handled successfully
	Retries      uint64 // failed attempts that were retried
	DeadLettered uint64 // records handed to the dead-letter handler after their last attempt
	Skipped      uint64 // records skipped because the commit metadata said they were done
	Commits      uint64 // successful offset commits

	Partitions []PartitionStats // assigned partitions, by topic and partition
	Paused     []PartitionStats // of Partitions, those paused by backpressure
}

// PartitionStats describes one assigned partition.
type PartitionStats struct {
	Topic      string
	Partition  int32
	Committed  int64 // last offset this member committed (or found committed); -1 none
	Watermark  int64 // offset that would be committed now: every record below it is done; -1 before the first fetch
	Incomplete int   // records fetched and not done
}

// Stats returns a snapshot of the consumer's counters. It is exact when the
// consumer is quiet and approximate while records move. Safe for
// concurrent use, also after Close.
func (c *Consumer) Stats() Stats {
	ss := c.sched.Stats()
	s := Stats{
		InFlight:     ss.Running,
		Queued:       ss.Queued,
		Processed:    c.processed.Load(),
		Retries:      c.retries.Load(),
		DeadLettered: c.deadLettered.Load(),
		Skipped:      c.skippedTotal.Load(),
		Commits:      c.commits.Load(),
	}
	c.mu.Lock()
	s.Buffered = c.buffered
	for k, p := range c.parts {
		ps := PartitionStats{
			Topic: p.topic, Partition: p.part,
			Committed: p.committed, Watermark: p.watermark(), Incomplete: p.pending,
		}
		s.Partitions = append(s.Partitions, ps)
		if c.paused[k] {
			s.Paused = append(s.Paused, ps)
		}
	}
	c.mu.Unlock()
	byTP := func(a, b PartitionStats) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	}
	slices.SortFunc(s.Partitions, byTP)
	slices.SortFunc(s.Paused, byTP)
	return s
}

func stack() []byte { return debug.Stack() }
