// Per-key control racing the ends: each feature (pause and resume, halts,
// Replace, WaitForRoom, WithRate), combined with High tasks, weights and
// WithMaxConcurrency(1), while Remove, Discard, Close or Shutdown races it.
// Whatever the interleaving: every accepted task resolves exactly once,
// the tasks of a key that ran did so in submission order per producer
// and lane (a Replace-tagged task in its predecessor's place, so tagged
// and untagged tasks are checked apart),
// Shutdown returns nil once every key is resumed, and no goroutine is left.

package seqsched_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqsched/seqsched"
	"github.com/stretchr/testify/require"
)

func TestPerKeyControlRacingTheEnds(t *testing.T) {
	features := []struct {
		name  string
		opts  []seqsched.Option
		topts func(i int) []seqsched.TaskOption
		fail  bool // every 7th task fails
		pause bool // a goroutine pauses and resumes the keys meanwhile
	}{
		{name: "pause", pause: true},
		{name: "halt", fail: true, topts: func(int) []seqsched.TaskOption { return []seqsched.TaskOption{seqsched.HaltOnError} }},
		{name: "replace", topts: func(i int) []seqsched.TaskOption {
			if i%3 == 0 {
				return []seqsched.TaskOption{seqsched.Replace("t")}
			}
			return nil
		}},
		{name: "waitforroom", opts: []seqsched.Option{seqsched.WithMaxQueue(4)}, pause: true,
			topts: func(int) []seqsched.TaskOption { return []seqsched.TaskOption{seqsched.WaitForRoom} }},
		{name: "rate", opts: []seqsched.Option{seqsched.WithRate(func(int) (float64, int) { return 20000, 2 })}},
	}
	combos := []struct {
		name string
		opts []seqsched.Option
		high bool
	}{
		{name: "plain"},
		{name: "high", high: true},
		{name: "weights", opts: []seqsched.Option{seqsched.WithWeight(func(k int) int { return k%3 + 1 })}},
		{name: "limit1", opts: []seqsched.Option{seqsched.WithMaxConcurrency(1)}},
	}
	ends := []string{"Remove", "Discard", "Close", "Shutdown"}
	for _, f := range features {
		for _, c := range combos {
			for _, end := range ends {
				t.Run(f.name+"/"+c.name+"/"+end, func(t *testing.T) {
					t.Parallel()
					opts := append(append([]seqsched.Option{seqsched.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, f.opts...), c.opts...)
					raceEnd(t, opts, f.topts, f.fail, f.pause, c.high, f.name == "replace", end)
				})
			}
		}
	}
}

// raceEnd runs 2 producers × 40 tasks on each of 4 keys with the feature,
// and races end against them.
func raceEnd(t *testing.T, opts []seqsched.Option, topts func(int) []seqsched.TaskOption, fail, pause, high, replace bool, end string) {
	const keys, producers, perKey = 4, 2, 40
	s, err := seqsched.New[int](opts...)
	require.NoError(t, err)
	// ran holds, per key, producer and class (lane, and whether tagged for
	// Replace: a replacement runs in its predecessor's place), the seqs of
	// the tasks that ran; each key's tasks run one at a time, and the race
	// detector checks that each happens-before the next.
	var ran [keys][producers][4][]int
	var (
		mu      sync.Mutex
		futures []*seqsched.Future[struct{}]
	)
	var producing sync.WaitGroup
	for p := range producers {
		producing.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for i := range perKey {
				for k := range keys {
					var to []seqsched.TaskOption
					if topts != nil {
						to = topts(i)
					}
					class := 0
					if high && i%4 == 0 {
						to, class = append(to, seqsched.High), 1
					}
					if replace && i%3 == 0 {
						class += 2
					}
					fut, err := s.Go(ctx, k, func(context.Context) error {
						ran[k][p][class] = append(ran[k][p][class], i)
						if fail && i%7 == 3 {
							return errors.New("failed")
						}
						return nil
					}, to...)
					if err != nil {
						continue // refused: closing, closed, full, or the wait's ctx ended
					}
					mu.Lock()
					futures = append(futures, fut)
					mu.Unlock()
				}
			}
		})
	}
	var done atomic.Bool
	var toggling sync.WaitGroup
	toggling.Go(func() { // pauses (if asked) and resumes the keys until the producers are done
		for n := 0; !done.Load(); n++ {
			k := n % keys
			if pause && n%3 == 0 {
				_ = s.Pause(k)
			} else {
				_ = s.Resume(k)
			}
			if n%64 == 0 {
				time.Sleep(10 * time.Microsecond) // spreads the toggles over the run; not a synchronisation
			}
		}
	})
	endErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		switch end {
		case "Remove":
			endErr <- ignore(s.Remove(ctx, 0), context.DeadlineExceeded)
		case "Discard":
			endErr <- ignore(s.Discard(ctx, 1), context.DeadlineExceeded)
		case "Close":
			endErr <- s.Close()
		case "Shutdown":
			endErr <- ignore(s.Shutdown(ctx), context.DeadlineExceeded)
		}
	}()
	producing.Wait()
	done.Store(true)
	toggling.Wait()
	require.NoError(t, <-endErr)
	for k := range keys {
		require.NoError(t, s.Resume(k))
	}
	within(t, 10*time.Second, "Shutdown", func() { require.NoError(t, s.Shutdown(context.Background())) })

	mu.Lock()
	fs := futures
	mu.Unlock()
	for i, fut := range fs {
		select {
		case <-fut.Done():
		default:
			t.Fatalf("future %d of %d unresolved after Shutdown returned nil", i, len(fs))
		}
	}
	st := s.Stats()
	require.Equal(t, uint64(len(fs)), st.Submitted)
	require.Equal(t, st.Submitted, st.Completed, "every accepted task resolved once")
	require.Zero(t, st.Paced)
	for k := range keys {
		for p := range producers {
			for class := range 4 {
				seqs := ran[k][p][class]
				for j := 1; j < len(seqs); j++ {
					require.Less(t, seqs[j-1], seqs[j], "key %d producer %d class %d: ran out of order or twice: %v", k, p, class, seqs)
				}
			}
		}
	}
}

func ignore(err, want error) error {
	if errors.Is(err, want) {
		return nil
	}
	return err
}
