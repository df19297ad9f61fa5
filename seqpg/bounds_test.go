package seqpg_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Without WithMaxConcurrency a worker holds at most the pool's MaxConns
// less two keys at once (8 per GOMAXPROCS on a larger pool): a held key
// keeps a connection for its group, and the worker keeps one to listen
// and one for its claims and renewals. The first claim takes every key
// the bound allows, so Leased shows the bound as soon as the handlers
// run.
func TestDefaultConcurrencyFitsThePool(t *testing.T) {
	for _, maxConns := range []int32{3, 5, int32(8*runtime.GOMAXPROCS(0) + 10)} {
		t.Run(fmt.Sprint("pool=", maxConns), func(t *testing.T) {
			_, dsn := newDB(t)
			cfg, err := pgxpool.ParseConfig(dsn)
			require.NoError(t, err)
			cfg.MaxConns = maxConns
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			want := min(int(maxConns)-2, 8*runtime.GOMAXPROCS(0))
			for k := range want + 2 {
				enqueue(t, pool, fmt.Sprint("k", k), "x")
			}
			started, release := make(chan struct{}, want+2), make(chan struct{})
			w := startWorker(t, pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
				started <- struct{}{}
				waitOrDone(ctx, release)
				return nil
			})
			for range want {
				<-started
			}
			assert.Equal(t, want, w.Stats().Leased)
			close(release)
		})
	}
}
