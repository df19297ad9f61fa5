package bench_test

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seqsched/seqsched"
)

// BenchmarkPrimitive measures, on the machine at hand, the building blocks
// whose cost bounds a task from below: what a seqsched task cannot do
// without (its future's allocation, a lock section on each side, the
// future's publication), next to what the stream floor does per task (a
// buffered channel send and receive). BENCHMARKS.md adds them up against
// the stream target. Every op runs on one goroutine, uncontended: the
// stream is serial (see BENCHMARKS.md), so this is the cost it pays.
func BenchmarkPrimitive(b *testing.B) {
	b.Run("op=alloc-future", func(b *testing.B) {
		// A ring keeps the futures live for a while, as a queue of
		// 1,000 tasks does, so that each is a heap allocation with its
		// share of GC.
		var ring [1024]*seqsched.Future[struct{}]
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			ring[i%len(ring)] = new(seqsched.Future[struct{}])
			i++
		}
	})
	b.Run("op=mutex-lock-unlock", func(b *testing.B) {
		var mu sync.Mutex
		for b.Loop() {
			mu.Lock()
			mu.Unlock() //nolint:staticcheck // the empty section is what is measured
		}
	})
	b.Run("op=atomic-swap", func(b *testing.B) {
		var p atomic.Pointer[int]
		v := new(int)
		for b.Loop() {
			p.Swap(v)
		}
	})
	b.Run("op=waitgroup-add-done", func(b *testing.B) {
		var wg sync.WaitGroup
		for b.Loop() {
			wg.Add(1)
			wg.Done()
		}
	})
	b.Run("op=hash-map-lookup", func(b *testing.B) {
		// The key's shard and session: a hash and a map hit.
		seed := maphash.MakeSeed()
		m := map[int]*int{7: new(int)}
		var sink uint64
		for b.Loop() {
			sink += maphash.Comparable(seed, 7) & 31
			if m[7] == nil {
				b.Fatal("lost the key")
			}
		}
		_ = sink
	})
	b.Run("op=chan-send-recv", func(b *testing.B) {
		ch := make(chan func(), 1024)
		f := func() {}
		for b.Loop() {
			ch <- f
			<-ch
		}
	})
}
