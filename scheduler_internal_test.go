package seqsched

import (
	"context"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
)

// How many shards a scheduler has shows only in its speed, so the rule is
// checked here.

func TestShardCountFollowsGOMAXPROCS(t *testing.T) {
	for procs, want := range map[int]int{1: 16, 2: 32, 3: 64, 4: 64, 5: 128, 8: 128, 9: 256, 16: 256, 64: 256} {
		require.Equal(t, want, shardCount(procs), "procs %d", procs)
	}
	s, err := New[int]()
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Shutdown(context.Background())) }()
	n := shardCount(runtime.GOMAXPROCS(0))
	require.Len(t, s.shards, n)
	require.Equal(t, uint64(n-1), s.mask)
}

func TestShardsMustBeAPowerOfTwo(t *testing.T) {
	for _, n := range []int{1, 2, 4, 64} {
		s, err := New[int](WithShards(n))
		require.NoError(t, err, "shards %d", n)
		require.Len(t, s.shards, n)
		require.NoError(t, s.Shutdown(context.Background()))
	}
	for _, n := range []int{-2, 3, 6, 12} {
		_, err := New[int](WithShards(n))
		require.ErrorIs(t, err, ErrInvalidOption, "shards %d", n)
	}
}

// Key types that cannot hold a NaN or an uncomparable value skip the key
// check: it is decided once, from K, at New.
func TestKeyCheckIsDecidedFromTheKeyType(t *testing.T) {
	type plain struct {
		A int
		B string
		C [3]byte
		D *int
	}
	type withFloat struct {
		A int
		F [2]float32
	}
	type withAny struct{ X any }
	for typ, want := range map[reflect.Type]bool{
		reflect.TypeFor[int]():        false,
		reflect.TypeFor[string]():     false,
		reflect.TypeFor[plain]():      false,
		reflect.TypeFor[[0]float64](): false,
		reflect.TypeFor[*float64]():   false,
		reflect.TypeFor[float64]():    true,
		reflect.TypeFor[complex64]():  true,
		reflect.TypeFor[withFloat]():  true,
		reflect.TypeFor[any]():        true,
		reflect.TypeFor[withAny]():    true,
		reflect.TypeFor[[1]error]():   true,
	} {
		require.Equal(t, want, keyCheckNeeded(typ), "%v", typ)
	}
	s, err := New[int]()
	require.NoError(t, err)
	require.False(t, s.checkKeys)
	require.NoError(t, s.Shutdown(context.Background()))
}

// Shutdown is quiet only after its barrier: a worker that gives back the
// last live token after Shutdown set closed, but before the barrier, must
// not end it. A Submit that saw closed unset may still be about to take a
// token under its shard lock (the barrier waits for it); a Shutdown that
// returned nil then would let that task run after it (CI, FuzzModel input
// 90a292a98ca0ada8).
func TestNotQuietBeforeShutdownsBarrier(t *testing.T) {
	s, err := New[string](WithShards(1))
	require.NoError(t, err)
	gate := make(chan struct{})
	f, err := s.Go(context.Background(), "a", func(context.Context) error { <-gate; return nil })
	require.NoError(t, err)

	paused, proceed := make(chan struct{}), make(chan struct{})
	shutdownClosedHook = func() { close(paused); <-proceed }
	defer func() { shutdownClosedHook = nil }()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	<-paused // closed is set; the barrier has not run

	close(gate)
	_, err = f.Await(context.Background())
	require.NoError(t, err)
	for s.live.Load() != 0 { // the worker gives its token back as its last act
		runtime.Gosched()
	}
	select {
	case <-s.quiet:
		t.Fatal("the scheduler went quiet before Shutdown's barrier")
	default:
	}
	close(proceed)
	require.NoError(t, <-shut)
	select {
	case <-s.quiet:
	default:
		t.Fatal("Shutdown returned nil but the scheduler is not quiet")
	}
}

// A release that gave back the last live token before Shutdown began must
// not end Shutdown: by the time it asks whether Shutdown has sealed, new
// tokens may have been taken, and the scheduler is busy again. (CI's
// fuzzing of the model found this: a worker that exited early in a plan
// was preempted between its decrement and that question, and when it
// resumed, after the final Shutdown's barrier, it ended Shutdown while
// other sessions' tasks ran; FuzzModel inputs 81f856969e868893,
// eef18bb43b398c91.)
func TestNotQuietFromAReleaseThatSawZeroBeforeShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New[int]()
		require.NoError(t, err)
		paused, resume := make(chan struct{}), make(chan struct{})
		var once sync.Once
		hook := func(of any, left int64) {
			if of == s && left == 0 {
				once.Do(func() { close(paused); <-resume })
			}
		}
		releaseHook.Store(&hook)
		defer releaseHook.Store(nil)

		first, err := s.Go(context.Background(), 1, func(context.Context) error { return nil })
		require.NoError(t, err)
		<-paused // key 1's worker gave back the last token; it has not decided yet
		_, err = first.Await(context.Background())
		require.NoError(t, err)

		gate := make(chan struct{})
		busy, err := s.Go(context.Background(), 2, func(context.Context) error { <-gate; return nil })
		require.NoError(t, err)
		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(context.Background()) }()
		synctest.Wait() // key 2's task waits on gate; Shutdown has sealed and waits

		close(resume)
		synctest.Wait() // key 1's worker has finished its release and exited
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned %v while key 2's task was running", err)
		default:
		}
		close(gate)
		_, err = busy.Await(context.Background())
		require.NoError(t, err)
		require.NoError(t, <-shut)
	})
}
