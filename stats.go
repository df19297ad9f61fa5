package seqsched

import (
	"time"

	"github.com/seqsched/seqsched/internal/histogram"
)

// Stats is a snapshot of a scheduler's state. When the scheduler is quiet
// (every future resolved), Sessions, Running and Queued are 0 and Submitted
// equals Completed. The counters only grow, so an exporter can report them
// as they are (see the seqprom and seqotel modules).
type Stats struct {
	Sessions  int    // sessions with queued or running work (idle records are not counted)
	Running   int    // sessions running a task right now
	Paused    int    // sessions paused (Pause, or a halt) with no task running, including one Pause found waiting for its rate
	Paced     int    // sessions waiting for a token of their WithRate bucket, not paused
	Queued    int    // tasks waiting, all sessions
	Submitted uint64 // tasks accepted since New
	Completed uint64 // tasks whose future resolved, for any reason
	Skipped   uint64 // of Completed, tasks that never ran because their submit ctx ended or the scheduler gave up on them (Close, or Shutdown whose ctx ended) (Outcomes.Skipped, both lanes)
	Discarded uint64 // of Completed, tasks that never ran because Discard dropped them (Outcomes.Discarded, both lanes)
	Replaced  uint64 // of Completed, tasks that never ran because a newer one with their Replace tag took their place (Outcomes.Replaced, both lanes)
	Panics    uint64 // of Completed, tasks whose fn panicked or called runtime.Goexit
	Yields    uint64 // times a session gave up its turn to another
	SlowTasks uint64 // tasks that ran longer than WithSlowTask's limit
	Halts     uint64 // times a failed HaltOnError task halted its session

	High, Normal PriorityStats // the figures above split by priority, and queue waits
}

// PriorityStats are the figures of one priority lane, over all sessions.
type PriorityStats struct {
	Queued    int       // tasks waiting
	Completed uint64    // tasks whose future resolved, for any reason
	Outcomes  Outcomes  // Completed, by how each task ended
	Wait      WaitStats // queue waits of started tasks; only with WithWaitHistogram

	// Queue waits (submit to start) of started tasks and run times (fn's
	// start to its return), counted in the buckets of HistogramBounds;
	// only with WithWaitHistogram and WithRunHistogram.
	WaitHistogram, RunHistogram Histogram
}

// Outcomes counts tasks by how they ended; each task counts once, and the
// fields add up to Completed.
type Outcomes struct {
	Succeeded uint64 // fn returned nil
	Failed    uint64 // fn returned an error
	Panicked  uint64 // fn panicked or called runtime.Goexit
	Skipped   uint64 // never ran: its submit ctx ended, or the scheduler gave up on it (Close, or Shutdown whose ctx ended)
	Discarded uint64 // never ran: Discard dropped it
	Replaced  uint64 // never ran: a newer task with its Replace tag took its place
}

// outcomes is a shard's Outcomes of one priority, guarded by sh.mu.
type outcomes [nOutcomes]uint64

func (o *outcomes) total() uint64 {
	var n uint64
	for _, c := range o {
		n += c
	}
	return n
}

func (o *outcomes) public() Outcomes {
	return Outcomes{Succeeded: o[outcomeSucceeded], Failed: o[outcomeFailed], Panicked: o[outcomePanicked],
		Skipped: o[outcomeSkipped], Discarded: o[outcomeDiscarded], Replaced: o[outcomeReplaced]}
}

// Stats returns a snapshot of the scheduler's counters. Each shard of
// sessions is read under its lock, so the figures are exact when the
// scheduler is quiet and approximate while tasks move: a backlogged
// session's worker counts the outcomes of the tasks it ran without a lock
// section in its next one, so they may lag by up to a turn's tasks
// (WithYieldAfter) while the session runs. Queued tasks are counted as
// queued until they start. Safe for concurrent use, and it never waits
// for a task.
func (s *Scheduler[K]) Stats() Stats {
	var st Stats
	if s == nil || s.shards == nil {
		return st
	}
	var counts [2]outcomes
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Sessions += sh.busy
		st.Running += sh.running
		st.Paused += sh.paused
		st.Paced += sh.paced
		st.Halts += sh.halts
		st.Normal.Queued += sh.queued[Normal] + sh.runQueued()
		st.High.Queued += sh.queued[High]
		for p := range counts {
			for o := range counts[p] {
				counts[p][o] += sh.counts[p][o]
			}
		}
		st.Submitted += sh.submitted
		sh.mu.Unlock()
	}
	for p, ps := range []*PriorityStats{&st.Normal, &st.High} {
		c := &counts[p]
		ps.Completed = c.total()
		ps.Outcomes = c.public()
		st.Skipped += c[outcomeSkipped]
		st.Discarded += c[outcomeDiscarded]
		st.Replaced += c[outcomeReplaced]
		st.Panics += c[outcomePanicked]
		if s.waitHist != nil {
			ps.Wait, ps.WaitHistogram = waitsOf(s.waitHist[p])
		}
		if s.runHist != nil {
			ps.RunHistogram = histogramOf(&s.runHist[p])
		}
	}
	st.Queued = st.Normal.Queued + st.High.Queued
	st.Completed = st.Normal.Completed + st.High.Completed
	st.Yields = s.yields.Load()
	st.SlowTasks = s.slowTasks.Load()
	return st
}

// WaitStats summarises queue waits (submit to start) of one priority. It is
// zero unless the scheduler was created with [WithWaitHistogram]. Quantiles
// are bucket upper bounds, at most 12.5% above the true value (and never
// above Max).
type WaitStats struct {
	Count uint64        // tasks that started
	P50   time.Duration // median wait
	P99   time.Duration // 99th percentile wait
	Max   time.Duration // longest wait
}

// waitsOf returns the queue waits f counted as WaitStats and as a
// Histogram, from one snapshot: their counts agree.
func waitsOf(f *histogram.Fine) (WaitStats, Histogram) {
	snap := f.Snapshot()
	w := WaitStats{Count: snap.Count, Max: snap.Max, P50: snap.Quantile(0.50), P99: snap.Quantile(0.99)}
	return w, Histogram{Count: snap.Count, Sum: snap.Sum, Buckets: snap.Buckets()}
}
