package seqpg_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
)

// panicky is a slog handler that panics on every record.
type panicky struct{ slog.Handler }

func (panicky) Enabled(context.Context, slog.Level) bool  { return true }
func (panicky) Handle(context.Context, slog.Record) error { panic("logger down") }

// A logger that panics loses its records, not the worker: failures are
// still retried and the key goes on.
func TestPanickingLoggerLosesRecordsNotJobs(t *testing.T) {
	pool, _ := newDB(t)
	r := newRecorder()
	w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		r.add(job)
		if job.Attempt == 1 {
			return errors.New("first attempt fails, and is logged")
		}
		return nil
	}, seqpg.WithLogger(slog.New(panicky{})))
	enqueue(t, pool, "k", "a")
	enqueue(t, pool, "k", "b")
	assert.Equal(t, []string{"a", "a", "b", "b"}, r.wait(t, 4))
	eventually(t, "both jobs to complete", func() bool { return w.Stats().Completed == 2 })
	assert.Equal(t, uint64(2), w.Stats().Retried)
}
