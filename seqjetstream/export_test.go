package seqjetstream

import "time"

// RememberedKeys returns how many keys the i-th JetStream consumer of c
// remembers the highest resolved sequence of (see appliedKeys), and how
// many it may.
func RememberedKeys(c *Consumer, i int) (n, max int) {
	p := c.parts[i]
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied.len(), p.applied.max
}

// SkipProgress makes c's InProgress timers send nothing for the stream
// sequences skip names, as if each time they came too late for them.
func SkipProgress(c *Consumer, skip func(seq uint64) bool) {
	for _, p := range c.parts {
		p.mu.Lock()
		p.skipProgress = skip
		p.mu.Unlock()
	}
}

// AdvanceClock moves the package's clock d forward, for every consumer:
// to them, d passed while nothing ran. The returned func moves it back.
func AdvanceClock(d time.Duration) (undo func()) {
	clockSkew.Add(int64(d))
	return func() { clockSkew.Add(-int64(d)) }
}

// Unreachable returns how many of the messages the server counts as
// unacknowledged the i-th JetStream consumer of c counts now as stored
// status messages out of its epoch's reach (see giveUpLocked).
func Unreachable(c *Consumer, i int) int {
	p := c.parts[i]
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unreachable.at(now())
}
