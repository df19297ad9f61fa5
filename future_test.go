// Futures: Await returns the task's value and error once it resolves, and
// Done is closed then; Await's ctx bounds only the wait, not the task; a
// PanicError unwraps an error value; a nil or zero Future is an error, not
// a hang.

package seqsched_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/assert"
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

// Every waiter of one future gets its result, however many wait and
// however: Awaits with a ctx that never ends and with one that can, and
// Done, begun in every order, and some Awaits that give up on the way
// (their ctx ends) without taking the others' wake-up.
func TestEveryWaiterOfAFutureGetsItsResult(t *testing.T) {
	for _, order := range [][]string{
		{"await", "await", "done"},
		{"done", "await", "await-cancelable"},
		{"await-cancelable", "gives-up", "await", "done"},
		{"gives-up", "await", "gives-up", "await-cancelable"},
	} {
		t.Run(strings.Join(order, ","), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newScheduler[string](t)
				open := make(chan struct{})
				f, err := seqsched.Submit(context.Background(), s, "k", func(context.Context) (int, error) {
					<-open
					return 42, nil
				})
				require.NoError(t, err)
				var got []int
				var mu sync.Mutex
				for _, how := range order {
					switch how {
					case "done":
						go func() {
							<-f.Done()
							v, err := f.Await(context.Background())
							assert.NoError(t, err)
							mu.Lock()
							got = append(got, v)
							mu.Unlock()
						}()
					case "gives-up":
						ctx, cancel := context.WithCancel(context.Background())
						go func() {
							_, err := f.Await(ctx)
							assert.ErrorIs(t, err, context.Canceled)
						}()
						synctest.Wait()
						cancel()
					default:
						ctx := context.Background()
						if how == "await-cancelable" {
							var cancel context.CancelFunc
							ctx, cancel = context.WithCancel(ctx)
							defer cancel()
						}
						go func() {
							v, err := f.Await(ctx)
							assert.NoError(t, err)
							mu.Lock()
							got = append(got, v)
							mu.Unlock()
						}()
					}
					synctest.Wait()
				}
				close(open)
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				want := 0
				for _, how := range order {
					if how != "gives-up" {
						want++
					}
				}
				require.Len(t, got, want, "waiters that got the result")
				for _, v := range got {
					require.Equal(t, 42, v)
				}
			})
		})
	}
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

// A future outlives its task's session: once the task resolves, the
// session may go idle, be forgotten among the idle records and its record
// made another key's. An Await that passed its check before the task
// resolved (WaitPastItsCheck stands for one the scheduler preempted there)
// must still end cleanly, with its task's result, and leave the record's
// reuse unharmed: it reaches only what a recycled record keeps.
func TestAwaitThatOutlivesItsSessionsRecordEndsCleanly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler[string](t)
		ctx := context.Background()
		f, err := seqsched.Submit(ctx, s, "a", func(context.Context) (string, error) { return "a", nil })
		require.NoError(t, err)
		v, err := f.Await(ctx)
		require.NoError(t, err)
		require.Equal(t, "a", v)
		synctest.Wait() // a's goroutine has retired it: an idle record

		kept, err := seqsched.RecycleIdle(s, "a")
		require.NoError(t, err)
		require.Empty(t, kept, "a recycled record keeps only its scheduler, its spare parker and its start")

		require.True(t, seqsched.WaitPastItsCheck(f, ctx))
		v, err = f.Await(ctx)
		require.NoError(t, err)
		require.Equal(t, "a", v)

		// The record, now b's, works as a new one.
		g, err := seqsched.Submit(ctx, s, "b", func(context.Context) (string, error) { return "b", nil })
		require.NoError(t, err)
		v, err = g.Await(ctx)
		require.NoError(t, err)
		require.Equal(t, "b", v)
	})
}
