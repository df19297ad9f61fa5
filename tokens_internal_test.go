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
