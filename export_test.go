package seqsched

// WithShards sets how many shards a scheduler has (a power of two). With 1,
// every key shares one shard, so tests exercise what shard-mates do to each
// other (the start queue) whatever the keys hash to.
func WithShards(n int) Option { return shardsOption(n) }

type shardsOption int

func (o shardsOption) apply(opts *options) { opts.shards = int(o) }

func init() { checkTokens = true }

// TokenViolations counts the releases, over every scheduler of the test
// binary, that left fewer live tokens than running workers.
func TokenViolations() int64 { return tokenViolations.Load() }

// FirstTokenViolation is the stack of the first token violation, if any.
func FirstTokenViolation() string {
	if p := firstViolation.Load(); p != nil {
		return *p
	}
	return ""
}

// CheckLocks switches the lock check on (see checkLocks) and returns a
// func that switches it off and reports the violations seen meanwhile, and
// how many calls of user code it looked at. Tests that use it must not run
// in parallel with others.
func CheckLocks() (stop func() (violations, checked int64)) {
	before, checkedBefore := lockViolations.Load(), lockChecked.Load()
	checkLocks.Store(true)
	return func() (int64, int64) {
		checkLocks.Store(false)
		return lockViolations.Load() - before, lockChecked.Load() - checkedBefore
	}
}

// Slack returns s's live tokens minus its running workers (0 when quiet).
func Slack[K comparable](s *Scheduler[K]) int64 { return s.slack.Load() }

// Live returns s's live tokens.
func Live[K comparable](s *Scheduler[K]) int64 { return s.tokens() }
