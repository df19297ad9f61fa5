package seqsched_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// goexitErrCtx is a submit ctx whose Err calls runtime.Goexit once armed.
type goexitErrCtx struct {
	context.Context
	armed *atomic.Bool
}

func (c goexitErrCtx) Err() error {
	if c.armed.Load() {
		runtime.Goexit()
	}
	return c.Context.Err()
}

// When a task's submit ctx ends, a goroutine of package context latches
// the task ctx's end, reading the submit ctx's Err (siteCtxWatch in
// callsite.go's table: a Goexit there ends the task ctx with Canceled).
// An Err that calls runtime.Goexit there must not leave the task ctx
// undone for ever: a task waiting on its Done would never return, and
// Shutdown never go quiet. Found by the model test (seed
// 4290708112763988891: blockctx tasks with a hostile submit ctx whose Err
// script holds a goexit; the final Shutdown timed out).
func TestSubmitCtxErrGoexitInTheWatchStillEndsTheTaskCtx(t *testing.T) {
	s := newScheduler[string](t)
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	var armed atomic.Bool
	started := make(chan struct{})
	f, err := s.Go(goexitErrCtx{parent, &armed}, "a", func(ctx context.Context) error {
		done := ctx.Done() // the task ctx now watches its submit ctx
		close(started)
		select {
		case <-done:
			return nil
		case <-time.After(5 * time.Second): // only turns the hang into a failure
			return errors.New("the task's ctx was not done 5s after its submit ctx was canceled")
		}
	})
	require.NoError(t, err)
	<-started
	armed.Store(true) // from now on the submit ctx's Err calls runtime.Goexit
	cancel()
	_, err = f.Await(context.Background())
	require.NoError(t, err)
}

// chanCtx is a submit ctx that package context cannot see through (its own
// Done channel), so that it watches it on a goroutine of its own; its
// Value calls runtime.Goexit once armed.
type chanCtx struct {
	context.Context // Background, for Deadline
	done            chan struct{}
	armed           *atomic.Bool
}

func (c chanCtx) Done() <-chan struct{} { return c.done }

func (c chanCtx) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

func (c chanCtx) Value(any) any {
	if c.armed.Load() {
		runtime.Goexit()
	}
	return nil
}

// The same through the submit ctx's Value, which package context's
// goroutine calls for the cause when the submit ctx ends. Found by the
// model test with the Err case excluded (seed 3542993865739922575, whose
// submit ctxs' Value script holds a goexit and no Err script).
func TestSubmitCtxValueGoexitInTheWatchStillEndsTheTaskCtx(t *testing.T) {
	s := newScheduler[string](t)
	var armed atomic.Bool
	parent := chanCtx{Context: context.Background(), done: make(chan struct{}), armed: &armed}
	started := make(chan struct{})
	f, err := s.Go(parent, "a", func(ctx context.Context) error {
		done := ctx.Done() // the task ctx now watches its submit ctx
		close(started)
		select {
		case <-done:
			return nil
		case <-time.After(5 * time.Second): // only turns the hang into a failure
			return errors.New("the task's ctx was not done 5s after its submit ctx ended")
		}
	})
	require.NoError(t, err)
	<-started
	armed.Store(true) // from now on the submit ctx's Value calls runtime.Goexit
	close(parent.done)
	_, err = f.Await(context.Background())
	require.NoError(t, err)
}
