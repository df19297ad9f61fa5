// Order: the tasks of one session run one at a time, in the order they were
// accepted (within a priority), and each task's effects happen before the
// next task of its session starts; a session reached through a handle and
// through its key is one session, with the same FIFOs.

package seqsched_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTasksOfOneSessionRunInSubmissionOrder(t *testing.T) {
	s := newScheduler[string](t)
	// got is not synchronised: the race detector checks that each task
	// happens-before the next task of its session.
	var got []int
	var last *seqsched.Future[struct{}]
	for i := range 1000 {
		f, err := s.Go(context.Background(), "k", func(context.Context) error {
			got = append(got, i)
			return nil
		})
		require.NoError(t, err)
		last = f
	}
	awaitAll(t, last)
	want := make([]int, 1000)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, got)
}

func TestClassicBalanceCaseRunsInOrder(t *testing.T) {
	s := newScheduler[int](t)
	balance := 100 // owned by session 7's tasks only
	op := func(amount int) func(context.Context) (int, error) {
		return func(context.Context) (int, error) {
			if balance+amount < 0 {
				return balance, fmt.Errorf("overdraft: balance %d, amount %d", balance, amount)
			}
			balance += amount
			return balance, nil
		}
	}
	var fs []*seqsched.Future[int]
	for _, amount := range []int{-50, +100, -150} {
		f, err := seqsched.Submit(context.Background(), s, 7, op(amount))
		require.NoError(t, err)
		fs = append(fs, f)
	}
	var got []int
	for _, f := range fs {
		v, err := f.Await(context.Background())
		require.NoError(t, err)
		got = append(got, v)
	}
	assert.Equal(t, []int{50, 150, 0}, got)
}

func TestTasksOfOneSessionNeverOverlap(t *testing.T) {
	s := newScheduler[int](t)
	const producers, perProducer = 8, 500
	var inFlight, maxInFlight atomic.Int32
	counter := 0 // unsynchronised on purpose
	perProducerOrder := make([][]int, producers)
	var wg sync.WaitGroup
	futures := make([][]*seqsched.Future[struct{}], producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perProducer {
				f, err := s.Go(context.Background(), 1, func(context.Context) error {
					n := inFlight.Add(1)
					if n > maxInFlight.Load() {
						maxInFlight.Store(n)
					}
					runtime.Gosched()
					counter++
					perProducerOrder[p] = append(perProducerOrder[p], i)
					inFlight.Add(-1)
					return nil
				})
				if !assert.NoError(t, err) {
					return
				}
				futures[p] = append(futures[p], f)
			}
		}()
	}
	wg.Wait()
	for _, fs := range futures {
		awaitAll(t, fs...)
	}
	require.Equal(t, int32(1), maxInFlight.Load(), "tasks of one session overlapped")
	require.Equal(t, producers*perProducer, counter)
	for p, got := range perProducerOrder {
		for i, v := range got {
			require.Equal(t, i, v, "producer %d: task %d ran as %d", p, i, v)
		}
	}
}

func TestHandleAndKeyJoinTheSameFIFOs(t *testing.T) {
	s := newScheduler[string](t)
	h, err := s.Open("a")
	require.NoError(t, err)
	require.Equal(t, "a", h.Key())
	release, g := gate(t, s, "a")
	var r recorder
	add := func(name string) func(context.Context) error {
		return func(context.Context) error { r.add("%s", name); return nil }
	}
	f1, err := h.Go(context.Background(), add("h1"))
	require.NoError(t, err)
	f2, err := s.Go(context.Background(), "a", add("k2"))
	require.NoError(t, err)
	require.NoError(t, h.Post(context.Background(), add("p3")))
	require.NoError(t, s.Post(context.Background(), "a", add("kp4")))
	f5, err := seqsched.SubmitTo(context.Background(), h, func(context.Context) (int, error) { r.add("s5"); return 5, nil })
	require.NoError(t, err)
	f6, err := h.Go(context.Background(), add("H6"), seqsched.High)
	require.NoError(t, err)
	high, normal := h.Queued()
	require.Equal(t, [2]int{1, 5}, [2]int{high, normal}, "the running gate is not counted")
	high, normal = s.Queued("a")
	require.Equal(t, [2]int{1, 5}, [2]int{high, normal})
	release()
	awaitAll(t, g, f1, f2, f6)
	v, err := f5.Await(context.Background())
	require.NoError(t, err)
	require.Equal(t, 5, v)
	require.NoError(t, h.Close(context.Background()))
	require.Equal(t, []string{"H6", "h1", "k2", "p3", "kp4", "s5"}, r.get())
	high, normal = h.Queued()
	require.Zero(t, high+normal)
}
