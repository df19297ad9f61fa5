package seqsched

import "unsafe"

// WithShards sets how many shards a scheduler has (a power of two). With 1,
// every key shares one shard, so tests exercise what shard-mates do to each
// other whatever the keys hash to.
func WithShards(n int) Option { return shardsOption(n) }

type shardsOption int

func (o shardsOption) apply(opts *options) { opts.shards = int(o) }

// Live returns s's live tokens: its goroutines, and its sessions waiting
// for a slot. 0 once Shutdown returned nil.
func Live[K comparable](s *Scheduler[K]) int64 { return s.tokens() }

func init() { checkMoves = true }

// BadMoves counts, over every scheduler of the test binary, the session
// moves that are not edges of the state machine's diagram (session.go).
func BadMoves() int64 { return badMoves.Load() }

// TaskSizes returns the sizes of a task's one allocation: a Go future
// (Future[struct{}]), a Submit future of an int (Future[int]) and a posted
// task.
func TaskSizes() (goFuture, intFuture, post uintptr) {
	return unsafe.Sizeof(Future[struct{}]{}), unsafe.Sizeof(Future[int]{}), unsafe.Sizeof(posted{})
}
