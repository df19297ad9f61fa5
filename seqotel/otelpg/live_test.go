package otelpg_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/seqsched/seqsched/internal/pgtest"
	"github.com/seqsched/seqsched/seqotel"
	"github.com/seqsched/seqsched/seqpg"
)

// newDB returns a pool on a fresh, migrated database, closed when the test
// ends.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.Shared(t).CreateDB(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, seqpg.Migrate(ctx, pool))
	return pool
}

// On a live worker: a span per attempt, each telling its attempt and the
// lease's fencing token; the failed one with status Error.
func TestTracingMakesASpanPerHandlerCallOfALiveWorker(t *testing.T) {
	tr, exp, _ := tracing(t)
	pool := newDB(t)
	ctx := context.Background()
	var failed atomic.Bool
	tokens := make(chan int64, 2)
	w, err := seqpg.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		f, _ := seqpg.LeaseOf(ctx)
		tokens <- f.Token
		if failed.CompareAndSwap(false, true) {
			return errors.New("first attempt fails")
		}
		return nil
	}, seqpg.WithInterceptor(tr.Intercept), seqpg.WithPollInterval(50*time.Millisecond),
		seqpg.WithLease(10*time.Second),
		seqpg.WithRetries(3, func(context.Context, *seqpg.Job, int, error) time.Duration { return 0 }))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, w.Close(cctx))
		require.NoError(t, <-done)
	}()
	var id int64
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		e, err := seqpg.Enqueue(ctx, tx, "account-7", []byte("x"), seqpg.Kind("deposit"))
		id = e.ID
		return err
	}))
	// The span ends when the handler call returns, after it sent its
	// token; the completion commits after that: wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for w.Stats().Completed < 1 {
		require.False(t, time.Now().After(deadline), "timed out waiting for the completion: %+v", w.Stats())
		time.Sleep(10 * time.Millisecond)
	}
	first, second := <-tokens, <-tokens
	calls := spansNamed(exp, "process deposit")
	require.Len(t, calls, 2, "a span per attempt")
	for i, want := range []struct {
		attempt int
		token   int64
		code    codes.Code
	}{{1, first, codes.Error}, {2, second, codes.Unset}} {
		sp := calls[i]
		attrs := attribute.NewSet(sp.Attributes...)
		a, _ := attrs.Value(seqotel.AttemptAttribute)
		assert.Equal(t, int64(want.attempt), a.AsInt64(), "span %d: attempt", i)
		tok, _ := attrs.Value("seqpg.lease.token")
		assert.Equal(t, want.token, tok.AsInt64(), "span %d: lease token", i)
		mid, _ := attrs.Value("messaging.message.id")
		assert.Equal(t, fmt.Sprint(id), mid.AsString(), "span %d: job id", i)
		assert.Equal(t, want.code, sp.Status.Code, "span %d: status", i)
	}
}
