package seqpg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Under WithHaltOnError a job that used its attempts halts its key,
// durably: the key's later jobs wait, other keys go on; Resume runs the
// job again with a new budget, then the rest.
func TestHaltOnErrorHaltsKeyUntilResume(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	healthy := make(chan struct{})
	r := newRecorder()
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if string(job.Payload) == "fails" {
			select {
			case <-healthy:
			default:
				return errors.New("down")
			}
		}
		return nil
	}, seqpg.WithHaltOnError())
	enqueue(t, pool, "k", "fails")
	enqueue(t, pool, "k", "next")
	assert.Equal(t, []string{"fails", "fails", "fails"}, r.wait(t, 3))
	eventually(t, "the key to halt", func() bool { return state(t, pool, "k").Halted })
	assert.Equal(t, seqpg.KeyState{Pending: 2, Halted: true, HaltError: "down"}, state(t, pool, "k"))
	// Halted counts after the commit returns, which the database shows first.
	eventually(t, "the halt to be counted", func() bool { return w.Stats().Halted == 1 })

	enqueue(t, pool, "other", "o")
	assert.Equal(t, []string{"o"}, r.wait(t, 1), "a halted key blocks only itself")

	close(healthy)
	require.NoError(t, seqpg.Resume(ctx, pool, "k"))
	assert.Equal(t, []string{"fails", "next"}, r.wait(t, 2))
	assert.Equal(t, []string{"fails", "fails", "fails", "fails", "next"}, r.of("k"))
}

// Discard drops a halted key's backlog, the failed job with it, and lifts
// the halt: the key's next job runs.
func TestDiscardLiftsHaltAndDropsBacklog(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	r := newRecorder()
	startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if string(job.Payload) == "fails" {
			return seqpg.Terminal(errors.New("down"))
		}
		return nil
	}, seqpg.WithHaltOnError())
	enqueue(t, pool, "k", "fails")
	enqueue(t, pool, "k", "dropped1")
	enqueue(t, pool, "k", "dropped2")
	r.wait(t, 1)
	eventually(t, "the key to halt", func() bool { return state(t, pool, "k").Halted })
	n, err := seqpg.Discard(ctx, pool, "k")
	require.NoError(t, err)
	assert.Equal(t, int64(3), n)
	assert.Equal(t, seqpg.KeyState{}, state(t, pool, "k"))
	enqueue(t, pool, "k", "later")
	assert.Equal(t, []string{"later"}, r.wait(t, 1))
}

// Pause holds a key's jobs, durably, before and after they are enqueued;
// other keys go on; Resume releases them in order.
func TestPauseHoldsKeyUntilResume(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	require.NoError(t, seqpg.Pause(ctx, pool, "k"))
	r := newRecorder()
	startWorker(t, pool, r.handler)
	enqueue(t, pool, "k", "1")
	enqueue(t, pool, "k", "2")
	enqueue(t, pool, "other", "o")
	assert.Equal(t, []string{"o"}, r.wait(t, 1))
	assert.Equal(t, seqpg.KeyState{Pending: 2, Paused: true}, state(t, pool, "k"))
	require.NoError(t, seqpg.Resume(ctx, pool, "k"))
	assert.Equal(t, []string{"1", "2"}, r.wait(t, 2))
}

// A High job runs before the key's Normal jobs not yet started, in commit
// order among High jobs.
func TestHighOvertakesQueuedNormal(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	require.NoError(t, seqpg.Pause(ctx, pool, "k"))
	enqueue(t, pool, "k", "n1")
	enqueue(t, pool, "k", "h1", seqpg.High())
	enqueue(t, pool, "k", "n2")
	enqueue(t, pool, "k", "h2", seqpg.High())
	r := newRecorder()
	startWorker(t, pool, r.handler)
	require.NoError(t, seqpg.Resume(ctx, pool, "k"))
	assert.Equal(t, []string{"h1", "h2", "n1", "n2"}, r.wait(t, 4))
}

// Replace(tag): the latest job of a tag takes the place of the one not
// yet started, and no job is added; a different lane or tag is another
// job.
func TestReplaceLatestWinsAmongNotStarted(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	require.NoError(t, seqpg.Pause(ctx, pool, "k"))
	first := enqueue(t, pool, "k", "price=1", seqpg.Replace("price"))
	enqueue(t, pool, "k", "other")
	second := enqueue(t, pool, "k", "price=2", seqpg.Replace("price"))
	enqueue(t, pool, "k", "volume=7", seqpg.Replace("volume"))
	assert.False(t, first.Replaced)
	assert.True(t, second.Replaced)
	assert.Equal(t, first.ID, second.ID)
	assert.Equal(t, first.Seq, second.Seq)
	r := newRecorder()
	startWorker(t, pool, r.handler)
	require.NoError(t, seqpg.Resume(ctx, pool, "k"))
	assert.Equal(t, []string{"price=2", "other", "volume=7"}, r.wait(t, 3))
}

// Replace never replaces a running job: the new one is added after it.
func TestReplaceSkipsRunningJob(t *testing.T) {
	pool, _ := newDB(t)
	started, release := make(chan struct{}), make(chan struct{})
	r := newRecorder()
	startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if string(job.Payload) == "v1" {
			close(started)
			waitOrDone(ctx, release)
		}
		return nil
	})
	enqueue(t, pool, "k", "v1", seqpg.Replace("v"))
	<-started
	e := enqueue(t, pool, "k", "v2", seqpg.Replace("v"))
	assert.False(t, e.Replaced)
	close(release)
	assert.Equal(t, []string{"v1", "v2"}, r.wait(t, 2))
}

// Discard drops a key's backlog but not its running job.
func TestDiscardDropsBacklogNotRunningJob(t *testing.T) {
	pool, _ := newDB(t)
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	r := newRecorder()
	startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if string(job.Payload) == "running" {
			close(started)
			waitOrDone(ctx, release)
		}
		return nil
	})
	enqueue(t, pool, "k", "running")
	<-started
	enqueue(t, pool, "k", "a")
	enqueue(t, pool, "k", "b")
	n, err := seqpg.Discard(ctx, pool, "k")
	require.NoError(t, err)
	assert.Equal(t, int64(2), n)
	close(release)
	eventually(t, "the key to empty", func() bool { return state(t, pool, "k").Pending == 0 })
	enqueue(t, pool, "k", "c")
	assert.Equal(t, []string{"running", "c"}, r.wait(t, 2))
}

// Pause and a new High job take effect at the key's next job while the
// key's group is open (its jobs so far not yet committed): each read of a
// job sees what others committed before it.
func TestControlsTakeEffectInsideAGroup(t *testing.T) {
	for _, control := range []string{"pause", "high"} {
		t.Run(control, func(t *testing.T) {
			pool, _ := newDB(t)
			ctx := context.Background()
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				for _, p := range []string{"1", "2", "3"} {
					if _, err := seqpg.Enqueue(ctx, tx, "k", []byte(p)); err != nil {
						return err
					}
				}
				return nil
			})
			require.NoError(t, err)
			second, release := make(chan struct{}), make(chan struct{})
			r := newRecorder()
			startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
				r.add(job)
				if string(job.Payload) == "2" {
					close(second)
					waitOrDone(ctx, release)
				}
				return nil
			}, seqpg.WithGroupCommit(16, time.Hour))
			<-second // job 1 is done, in the open group
			switch control {
			case "pause":
				require.NoError(t, seqpg.Pause(ctx, pool, "k"))
				close(release)
				assert.Equal(t, []string{"1", "2"}, r.wait(t, 2))
				eventually(t, "the key to be given back", func() bool { return !state(t, pool, "k").Leased })
				assert.Equal(t, seqpg.KeyState{Pending: 1, Paused: true}, state(t, pool, "k"))
				require.NoError(t, seqpg.Resume(ctx, pool, "k"))
				assert.Equal(t, []string{"3"}, r.wait(t, 1))
			case "high":
				enqueue(t, pool, "k", "h", seqpg.High())
				close(release)
				assert.Equal(t, []string{"1", "2", "h", "3"}, r.wait(t, 4))
			}
		})
	}
}
