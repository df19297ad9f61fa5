package seqsched_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// A forced Shutdown marks the drain of every closing session, so that a
// Remove waiting on it returns ErrClosed (issue 25, item 5: when Remove
// returns nil, every task accepted for the key has run). But a worker
// that finds the Shutdown gave up skips its session's queued tasks with
// ErrClosed itself, and if it gets through them and retires the session
// before the Shutdown's walk reaches its shard, the drain ends unmarked:
// Remove returns nil though tasks were dropped. Here the walk is slowed by
// other sessions with long queues, and the worker of "a" resumes as soon
// as the Shutdown cancels its running task's ctx. Found by the model test
// (regression seed 2281273544330182018 as a plain plan, about one run in
// 25 to 100; seeds 1114540858770147396 and 1114540858770147572).
func TestRemoveDuringAForcedShutdownDoesNotReturnNilOnceTasksWereDropped(t *testing.T) {
	for round := range 5 {
		s, err := seqsched.New[string]()
		require.NoError(t, err)
		nop := func(context.Context) error { return nil }
		stuck := make(chan struct{})
		var hung []*seqsched.Future[struct{}]
		for i := range 16 { // long queues for the Shutdown to walk
			key := fmt.Sprint("h", i)
			started := make(chan struct{})
			f, err := s.Go(context.Background(), key, func(context.Context) error {
				close(started)
				<-stuck // ignores its ctx
				return nil
			})
			require.NoError(t, err)
			<-started
			hung = append(hung, f)
			for range 1000 {
				_, err := s.Go(context.Background(), key, nop)
				require.NoError(t, err)
			}
		}
		started := make(chan struct{})
		_, err = s.Go(context.Background(), "a", func(ctx context.Context) error {
			close(started)
			<-ctx.Done() // returns as soon as the Shutdown gives up
			return nil
		})
		require.NoError(t, err)
		<-started
		var queued []*seqsched.Future[struct{}]
		for range 5 {
			f, err := s.Go(context.Background(), "a", nop)
			require.NoError(t, err)
			queued = append(queued, f)
		}
		removed := make(chan error, 1)
		go func() { removed <- s.Remove(context.Background(), "a") }()
		for { // until the Remove has begun: "a" refuses new tasks
			f, err := s.Go(context.Background(), "a", nop)
			if errors.Is(err, seqsched.ErrSessionClosing) {
				break
			}
			require.NoError(t, err)
			queued = append(queued, f)
			runtime.Gosched()
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, s.Shutdown(ctx), context.Canceled)
		var err2 error
		select {
		case err2 = <-removed:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Remove did not return", round)
		}
		dropped := 0
		for _, f := range queued {
			if _, err := f.Await(context.Background()); errors.Is(err, seqsched.ErrClosed) {
				dropped++
			}
		}
		if dropped > 0 && err2 == nil {
			t.Fatalf("round %d: Remove = nil though %d of the key's accepted tasks were dropped with ErrClosed; want ErrClosed",
				round, dropped)
		}
		close(stuck)
		awaitAll(t, hung...)
		require.NoError(t, s.Shutdown(context.Background()))
	}
}
