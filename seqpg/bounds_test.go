package seqpg_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

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

// Each group gives its connection back to the pool when it ends: on a
// pool of three (one key at a time, the listener, the claims), keys run
// one after the other without waiting for a connection, and once the
// keys are done only the listener's connection is held.
func TestGroupsGiveTheirConnectionBack(t *testing.T) {
	_, dsn := newDB(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		// pool.Close waits for every connection: one never given back
		// would hang the test rather than fail it.
		closed := make(chan struct{})
		go func() {
			pool.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Error("pool.Close: a connection was never given back")
		}
	})
	const keys, perKey = 6, 3
	for i := range perKey {
		for k := range keys {
			enqueue(t, pool, fmt.Sprint("k", k), fmt.Sprintf("k%d-%d", k, i))
		}
	}
	r := newRecorder()
	w := startWorker(t, pool, r.handler)
	r.wait(t, keys*perKey)
	eventually(t, "every key given back", func() bool { return w.Stats().Leased == 0 })
	eventually(t, "only the listener's connection held", func() bool { return pool.Stat().AcquiredConns() == 1 })
	eventually(t, "every job to be counted", func() bool { return w.Stats().Completed == keys*perKey })
}
