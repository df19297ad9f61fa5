package seqsched

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
)

// These tests look inside a shard's start queue: which goroutine starts a
// session is invisible through the public API except in goroutine counts.

// startState reads a shard's start-queue state.
func startState(sh *shard[int]) (pending, workers int, starter bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for sess := sh.pending.head; sess != nil; sess = sess.link {
		pending++
	}
	return pending, sh.workers, sh.starterOnWay
}

// gated submits a task to key that blocks until gate is closed.
func gated(t *testing.T, s *Scheduler[int], key int, gate <-chan struct{}) *Future[struct{}] {
	t.Helper()
	f, err := s.Go(context.Background(), key, func(context.Context) error {
		<-gate
		return nil
	})
	require.NoError(t, err)
	return f
}

func TestSessionStartsWhileItsShardsWorkersBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New[int]()
		require.NoError(t, err)
		sh := s.shard(0)
		gate := make(chan struct{})
		fs := []*Future[struct{}]{gated(t, s, 0, gate)}
		synctest.Wait() // key 0's worker is blocked in its task
		// Sessions activated now wait in the start queue; a starter must
		// start each of them although key 0's worker never comes back.
		for _, k := range keysOf(s, sh, 1, 5) {
			fs = append(fs, gated(t, s, k, gate))
		}
		synctest.Wait()
		pending, workers, starter := startState(sh)
		require.Equal(t, 0, pending, "every waiting session must have been started")
		require.Equal(t, 6, workers, "one goroutine per blocked session")
		require.False(t, starter)
		require.Equal(t, 6, s.Stats().Running)

		close(gate)
		awaitOK(t, fs...)
		synctest.Wait()
		pending, workers, starter = startState(sh)
		require.Equal(t, [3]any{0, 0, false}, [3]any{pending, workers, starter})
		require.NoError(t, s.Shutdown(context.Background()))
	})
}

// busyWithoutStarter blocks key 0's worker in a task until gate is closed,
// and pretends that a starter is on its way for key 0's shard, so that
// enqueue starts none: a session that then joins the start queue can only
// be taken by key 0's worker, once key 0 is idle.
func busyWithoutStarter(t *testing.T, s *Scheduler[int]) (sh *shard[int], gate chan struct{}, first *Future[struct{}]) {
	t.Helper()
	sh = s.shard(0)
	gate = make(chan struct{})
	first = gated(t, s, 0, gate)
	synctest.Wait()
	sh.mu.Lock()
	sh.starterOnWay = true
	sh.mu.Unlock()
	return sh, gate, first
}

func TestIdleWorkerTakesWaitingSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New[int]()
		require.NoError(t, err)
		sh, gate, first := busyWithoutStarter(t, s)
		other := keysOf(s, sh, 1, 1)[0]
		ran := false
		f, err := s.Go(context.Background(), other, func(context.Context) error {
			ran = true
			return nil
		})
		require.NoError(t, err)
		synctest.Wait()
		pending, workers, _ := startState(sh)
		require.Equal(t, 1, pending)
		require.Equal(t, 1, workers)
		require.False(t, ran)

		close(gate)
		awaitOK(t, first, f)
		require.True(t, ran)
		synctest.Wait()
		pending, workers, _ = startState(sh)
		require.Equal(t, 0, pending)
		require.Equal(t, 0, workers)

		sh.mu.Lock()
		sh.starterOnWay = false // no starter came: undo the pretence
		sh.mu.Unlock()
		require.NoError(t, s.Shutdown(context.Background()))
	})
}

func TestStarterFindingQueueEmptiedExits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New[int]()
		require.NoError(t, err)
		// A waiting session taken by key 0's worker leaves the starter
		// nothing to do; it must exit and clear the flag.
		sh, gate, first := busyWithoutStarter(t, s)
		f, err := s.Go(context.Background(), keysOf(s, sh, 1, 1)[0], noopTask)
		require.NoError(t, err)
		close(gate)
		awaitOK(t, first, f)
		synctest.Wait()
		sh.mu.Lock()
		s.takeToken() // the token activate would have taken for the starter
		s.startStarter(sh)
		sh.mu.Unlock()
		synctest.Wait()
		pending, workers, starter := startState(sh)
		require.Equal(t, [3]any{0, 0, false}, [3]any{pending, workers, starter})
		require.NoError(t, s.Shutdown(context.Background()))
	})
}
