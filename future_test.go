// Futures: Await returns the task's value and error once it resolves, and
// Done is closed then; Await's ctx bounds only the wait, not the task; a
// PanicError unwraps an error value; a nil or zero Future is an error, not
// a hang.

package seqsched_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

func TestAwaitReturnsValueAndError(t *testing.T) {
	s := newScheduler[string](t)
	boom := errors.New("boom")
	f, err := seqsched.Submit(context.Background(), s, "k", func(context.Context) (string, error) {
		return "partial", boom
	})
	require.NoError(t, err)
	v, err := f.Await(context.Background())
	require.ErrorIs(t, err, boom)
	require.Equal(t, "partial", v)

	// A resolved future answers every later call the same way.
	v, err = f.Await(context.Background())
	require.ErrorIs(t, err, boom)
	require.Equal(t, "partial", v)
}

func TestDoneIsClosedWhenFutureResolves(t *testing.T) {
	s := newScheduler[string](t)
	release, g := gate(t, s, "k")
	f, err := seqsched.Submit(context.Background(), s, "k", func(context.Context) (int, error) { return 42, nil })
	require.NoError(t, err)
	done := f.Done()
	select {
	case <-done:
		t.Fatal("Done closed before the task ran")
	default:
	}
	require.Equal(t, done, f.Done(), "Done must return the same channel")
	release()
	<-done
	v, err := f.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, 42, v)
	<-f.Done() // and stays closed
	awaitAll(t, g)
}

func TestPanicErrorUnwrapsErrorValue(t *testing.T) {
	s := newScheduler[string](t)
	f, err := s.Go(context.Background(), "k", func(context.Context) error { panic(context.DeadlineExceeded) })
	require.NoError(t, err)
	_, err = f.Await(context.Background())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, strings.HasPrefix(err.Error(), "seqsched: task panicked: "), err.Error())
}

func TestAwaitContextBoundsOnlyTheWait(t *testing.T) {
	s := newScheduler[string](t)
	release, g := gate(t, s, "k")
	ran := make(chan struct{})
	f, err := s.Go(context.Background(), "k", func(context.Context) error { close(ran); return nil })
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = f.Await(ctx)
	require.ErrorIs(t, err, context.Canceled)

	release()
	<-ran // the task still ran
	<-f.Done()
	_, err = f.Await(ctx)
	require.NoError(t, err, "a resolved future answers whatever the ctx")
	awaitAll(t, g)
}

func TestAwaitOnANilOrZeroFutureIsAnError(t *testing.T) {
	var nilF *seqsched.Future[int]
	_, err := nilF.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrNotNew)
	var zero seqsched.Future[int]
	_, err = zero.Await(context.Background())
	require.ErrorIs(t, err, seqsched.ErrNotNew)
	select {
	case <-zero.Done():
	default:
		t.Fatal("Done of a zero Future is not closed: a select on it would hang")
	}
}
