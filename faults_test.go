package seqsched_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

// Fault cases: what tasks, loggers and callers do wrong must not lose,
// duplicate or reorder work, block unrelated callers, or leak goroutines.

// Found by TestModel (seed 8328051232424530736): the goroutine that takes
// over after a Goexit started a fresh turn, so a session whose tasks called
// Goexit ran more than WithYieldAfter tasks while others waited.
func TestGoexitDoesNotLengthenTurn(t *testing.T) {
	s := newScheduler[string](t, seqsched.WithMaxConcurrency(1), seqsched.WithYieldAfter(10))
	var r recorder
	release, g := gate(t, s, "gate") // holds the only slot while we queue
	fs := []*seqsched.Future[struct{}]{}
	for i := range 20 {
		f, err := s.Go(context.Background(), "A", func(context.Context) error {
			r.add("A")
			if i == 4 || i == 8 {
				runtime.Goexit()
			}
			return nil
		})
		require.NoError(t, err)
		fs = append(fs, f)
	}
	for range 10 {
		fs = append(fs, record(t, s, &r, "B", "B"))
	}
	release()
	for i, f := range fs {
		_, err := f.Await(context.Background())
		if i == 4 || i == 8 {
			require.ErrorIs(t, err, seqsched.ErrGoexit)
		} else {
			require.NoError(t, err, "future %d", i)
		}
	}
	awaitAll(t, g)
	var want []string
	for _, key := range []string{"A", "B", "A"} {
		for range 10 {
			want = append(want, key)
		}
	}
	require.Equal(t, want, r.get(), "A's turn must end after 10 tasks, Goexits included")
}
