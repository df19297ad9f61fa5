package seqpg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
)

// Interceptors wrap every attempt, the first given outermost, with the
// handler's ctx; Stats counts completions, retries and dead letters.
func TestInterceptorsAndStats(t *testing.T) {
	pool, _ := newDB(t)
	type ctxKey struct{}
	trace := make(chan string, 100)
	ic := func(name string) seqpg.Interceptor {
		return func(ctx context.Context, job *seqpg.Job, next func(context.Context) error) error {
			trace <- name + ">"
			err := next(context.WithValue(ctx, ctxKey{}, name))
			trace <- "<" + name
			return err
		}
	}
	r := newRecorder()
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		trace <- "handler:" + ctx.Value(ctxKey{}).(string)
		r.add(job)
		if string(job.Payload) == "bad" {
			return errors.New("bad")
		}
		return nil
	}, seqpg.WithInterceptor(ic("outer")), seqpg.WithInterceptor(ic("inner")),
		seqpg.WithRetries(2, func(context.Context, *seqpg.Job, int, error) time.Duration { return 0 }))
	enqueue(t, pool, "k", "good")
	r.wait(t, 1)
	assert.Equal(t, []string{"outer>", "inner>", "handler:inner", "<inner", "<outer"},
		[]string{<-trace, <-trace, <-trace, <-trace, <-trace})
	enqueue(t, pool, "k", "bad")
	r.wait(t, 2)
	eventually(t, "the bad job to be dead-lettered", func() bool { return w.Stats().DeadLettered == 1 })
	s := w.Stats()
	assert.Equal(t, uint64(1), s.Completed)
	assert.Equal(t, uint64(1), s.Retried)
	assert.Equal(t, uint64(1), s.DeadLettered)
	assert.Positive(t, s.Claimed)
	assert.Positive(t, s.Scheduler.Completed, "jobs ran as seqsched tasks")
}
