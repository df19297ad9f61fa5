package seqkafka

// OnRunBegun makes c call f each time a Run has begun: it has passed its
// checks and holds the consumer, so that a Close from then on stops it and
// it returns nil. f runs on Run's goroutine before the first poll. Call it
// before c's first Run.
func OnRunBegun(c *Consumer, f func()) { c.runBegun = f }
