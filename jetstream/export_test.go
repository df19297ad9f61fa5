package jetstream

// RememberedKeys returns how many keys the i-th JetStream consumer of c
// remembers the highest resolved sequence of (see appliedKeys), and how
// many it may.
func RememberedKeys(c *Consumer, i int) (n, max int) {
	p := c.parts[i]
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied.len(), p.applied.max
}
