package seqsched_test

import (
	"context"
	"sync"
	"testing"

	"github.com/seqsched/seqsched"
)

// These benchmarks guard the hot path's cost; the comparative suite lives in
// the bench module. They run in the package's test binary, with the
// test-only token check on (export_test.go), so they overstate what a
// production build pays: compare builds with the bench module.

func noop(context.Context) error { return nil }

// BenchmarkStream: one session, tasks submitted back to back, the last awaited.
func BenchmarkStream(b *testing.B) {
	s, _ := seqsched.New[int]()
	defer s.Shutdown(context.Background())
	ctx := context.Background()
	b.ReportAllocs()
	var last *seqsched.Future[struct{}]
	for b.Loop() {
		last, _ = s.Go(ctx, 1, noop)
	}
	last.Await(ctx)
}

// BenchmarkRoundTrip: submit and await on an idle session.
func BenchmarkRoundTrip(b *testing.B) {
	s, _ := seqsched.New[int]()
	defer s.Shutdown(context.Background())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		f, _ := s.Go(ctx, 1, noop)
		f.Await(ctx)
	}
}

// BenchmarkManySessions: tasks spread over 1,000 sessions by parallel producers.
func BenchmarkManySessions(b *testing.B) {
	s, _ := seqsched.New[int]()
	defer s.Shutdown(context.Background())
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			s.Go(ctx, i%1000, noop)
		}
	})
}

// BenchmarkHandlePost: one session through a handle, tasks posted back to
// back (no future); the last one's end is waited for.
func BenchmarkHandlePost(b *testing.B) {
	s, _ := seqsched.New[int]()
	defer s.Shutdown(context.Background())
	h, _ := s.Open(1)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		postWG.Add(1)
		h.Post(ctx, postDone)
	}
	postWG.Wait()
}

var postWG sync.WaitGroup

func postDone(context.Context) error { postWG.Done(); return nil }

// BenchmarkHandleGo: BenchmarkStream through a handle.
func BenchmarkHandleGo(b *testing.B) {
	s, _ := seqsched.New[int]()
	defer s.Shutdown(context.Background())
	h, _ := s.Open(1)
	ctx := context.Background()
	b.ReportAllocs()
	var last *seqsched.Future[struct{}]
	for b.Loop() {
		last, _ = h.Go(ctx, noop)
	}
	last.Await(ctx)
}
