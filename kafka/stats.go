package kafka

import (
	"cmp"
	"slices"
)

// Stats is a snapshot of a consumer's state, from Consumer.Stats.
type Stats struct {
	InFlight     int    // records in a handler call now
	Buffered     int    // records fetched and not done, all partitions
	Processed    uint64 // records handled successfully
	Retries      uint64 // failed attempts that were retried
	DeadLettered uint64 // records that went through the dead-letter step
	Skipped      uint64 // records skipped because the commit metadata said they were done
	Commits      uint64 // successful offset commits

	Partitions []PartitionStats // assigned partitions, by topic and partition
}

// PartitionStats describes one assigned partition.
type PartitionStats struct {
	Topic     string
	Partition int32
	Paused    bool  // taking no records: its buffer is full (see WithMaxBuffered)
	Committed int64 // last offset committed (or found committed at assignment); -1 none
	Watermark int64 // offset a commit would carry now: every record below it is done; -1 before the first fetch
	Buffered  int   // records fetched and not done
}

// Stats returns a snapshot of the consumer's counters. It is exact when the
// consumer is quiet and approximate while records move. Safe for
// concurrent use, also after Close.
func (c *Consumer) Stats() Stats {
	s := Stats{Commits: c.commits.Load()}
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
		p.mu.Lock()
		st := PartitionStats{
			Topic: p.topic, Partition: p.part,
			Paused:    p.win.stopped || p.win.behind(),
			Committed: p.committed,
			Watermark: p.watermark(),
			Buffered:  p.win.buffered(),
		}
		p.mu.Unlock()
		s.Buffered += st.Buffered
		s.Partitions = append(s.Partitions, st)
	}
	slices.SortFunc(s.Partitions, func(a, b PartitionStats) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return s
}
