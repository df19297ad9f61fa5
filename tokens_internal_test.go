package seqsched

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// Item 12 of the second hardening (a task ran after Shutdown returned nil,
// on a goroutine that took over after a runtime.Goexit): the token check
// must balance across take-overs, so that it can see a worker running
// without a token whatever the Goexits before.
func TestTokenCountBalancesAcrossGoexitTakeOvers(t *testing.T) {
	for _, limit := range []int{0, 1} {
		s, err := New[int](WithMaxConcurrency(limit))
		require.NoError(t, err)
		var fs []*Future[struct{}]
		for key := range 3 {
			for i := range 10 {
				f, err := s.Go(context.Background(), key, func(context.Context) error {
					if i%2 == 0 {
						runtime.Goexit()
					}
					return nil
				})
				require.NoError(t, err)
				fs = append(fs, f)
			}
		}
		for _, f := range fs {
			<-f.Done()
		}
		require.NoError(t, s.Shutdown(context.Background()))
		require.Zero(t, s.slack.Load(), "limit %d: live tokens minus workers once quiet", limit)
	}
}

// The token check counts a session waiting in the ready queue as holding
// its token: a token given back while such a session waits, with no worker
// running short, is a violation. (Before, the check compared tokens with
// running workers only, so the scheduler could go quiet with a session
// still queued and nobody saw it.)
func TestTokenCheckSeesATokenLostWhileItsSessionWaitsForASlot(t *testing.T) {
	s, err := New[int](WithMaxConcurrency(1))
	require.NoError(t, err)
	gate := make(chan struct{})
	started := make(chan struct{})
	hold, err := s.Go(context.Background(), 0, func(context.Context) error {
		close(started)
		<-gate
		return nil
	})
	require.NoError(t, err)
	<-started
	queued, err := s.Go(context.Background(), 1, func(context.Context) error { return nil })
	require.NoError(t, err)
	s.slots.mu.Lock()
	waiting := s.slots.ready.head
	s.slots.mu.Unlock()
	require.NotNil(t, waiting, "key 1 waits in the ready queue")
	require.Zero(t, s.slack.Load(), "one worker and one waiting session hold the two tokens")

	before := tokenViolations.Load()
	s.release(1) // what a path that loses the waiting session's token would do
	require.Equal(t, before+1, tokenViolations.Load(), "the lost token is a violation")
	tokenViolations.Store(before) // the violation was staged
	s.takeToken()

	close(gate)
	_, err = hold.Await(context.Background())
	require.NoError(t, err)
	_, err = queued.Await(context.Background())
	require.NoError(t, err)
	require.NoError(t, s.Shutdown(context.Background()))
	require.Zero(t, s.slack.Load())
}
