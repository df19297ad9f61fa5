package seqpg_test

import (
	"testing"
	"time"

	"github.com/seqsched/seqsched/seqpg"
	"github.com/stretchr/testify/assert"
)

// An idle key's new job is picked up by NOTIFY, not by polling: with an
// hour between polls, jobs enqueued after the worker went idle still run.
func TestIdleKeyPickedUpByNotify(t *testing.T) {
	pool, _ := newDB(t)
	r := newRecorder()
	w := startWorker(t, pool, r.handler, seqpg.WithPollInterval(time.Hour))
	eventually(t, "the worker to listen", func() bool { return listening(t, pool) })
	for i, key := range []string{"a", "b", "a"} {
		enqueue(t, pool, key, key+string(rune('0'+i)))
		r.wait(t, 1)
	}
	assert.Equal(t, []string{"a0", "a2"}, r.of("a"))
	eventually(t, "three completions", func() bool { return w.Stats().Completed == 3 })
}

// Without LISTEN (a pooler that drops notifications) the worker finds new
// jobs by polling.
func TestWithoutListenPolls(t *testing.T) {
	pool, _ := newDB(t)
	r := newRecorder()
	startWorker(t, pool, r.handler, seqpg.WithoutListen(), seqpg.WithPollInterval(20*time.Millisecond))
	enqueue(t, pool, "a", "1")
	enqueue(t, pool, "a", "2")
	assert.Equal(t, []string{"1", "2"}, r.wait(t, 2))
	assert.False(t, listening(t, pool))
}

func listening(t testing.TB, pool interface {
	QueryRow(ctx contextT, sql string, args ...any) rowT
}) bool {
	t.Helper()
	var n int
	if err := pool.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND datname = current_database()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}
