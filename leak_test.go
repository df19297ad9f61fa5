package seqsched_test

import (
	"context"
	"errors"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestThousandSchedulersLeaveNoGoroutine creates and shuts down 1,000
// schedulers of every shape — unused, idle, busy, gracefully or forcibly
// stopped — and then finds no goroutine left.
func TestThousandSchedulersLeaveNoGoroutine(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 1000 {
		var opts []seqsched.Option
		if i%2 == 1 {
			opts = append(opts, seqsched.WithMaxConcurrency(1+i%3))
		}
		s, err := seqsched.New[int](opts...)
		require.NoError(t, err)
		var fs []*seqsched.Future[struct{}]
		for k := range i % 5 { // 0 to 4 sessions
			for range 3 {
				f, err := s.Go(context.Background(), k, func(context.Context) error { return nil })
				require.NoError(t, err)
				fs = append(fs, f)
			}
		}
		if i%7 == 0 { // forced: drops what has not started
			err := s.Shutdown(canceled)
			if err != nil {
				require.ErrorIs(t, err, context.Canceled)
			}
		}
		require.NoError(t, s.Shutdown(context.Background()))
		for _, f := range fs {
			if _, err := f.Await(context.Background()); err != nil && !errors.Is(err, seqsched.ErrClosed) {
				t.Fatalf("scheduler %d: future resolved with %v", i, err)
			}
		}
	}
	goleak.VerifyNone(t, ignore)
}
