package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/seqsched/seqsched/internal/pgclaim"
	"github.com/seqsched/seqsched/internal/pgtest"
	"github.com/seqsched/seqsched/seqpg"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	workers  = 100 // River's MaxWorkers, seqpg's WithMaxConcurrency
	poolSize = workers + 20
)

// newDB returns a pool on a fresh database with both seqpg's and River's
// schemas.
func newDB(b testing.TB) *pgxpool.Pool {
	b.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.Shared(b).CreateDB(b))
	must(b, err)
	cfg.MaxConns = poolSize
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	must(b, err)
	b.Cleanup(pool.Close)
	must(b, seqpg.Migrate(ctx, pool))
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	must(b, err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	must(b, err)
	return pool
}

func must(b testing.TB, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

// quiet keeps the workers' logs out of the benchmark output; what they
// would have said about stalls is reported by failures instead.
var quiet = seqpg.WithLogger(slog.New(slog.DiscardHandler))

// failures adds up the Stats figures that name a stall's cause (a
// database error, a lease lost, a lease expired locally between jobs or
// while one ran), and the leases taken, over the workers of one
// benchmark.
type failures struct{ dbErrors, leaseLost, leaseExpired, leaseExpiredRunning, claimed uint64 }

func (f *failures) add(s seqpg.Stats) {
	f.dbErrors += s.DBErrors
	f.leaseLost += s.LeaseLost
	f.leaseExpired += s.LeaseExpired
	f.leaseExpiredRunning += s.LeaseExpiredRunning
	f.claimed += s.Claimed
}

// report reports the figures as benchmark metrics (totals over the run),
// so that a slow result says which path stalled.
func (f *failures) report(b *testing.B) {
	b.ReportMetric(float64(f.dbErrors), "db-errors")
	b.ReportMetric(float64(f.leaseLost), "leases-lost")
	b.ReportMetric(float64(f.leaseExpired), "leases-expired")
	b.ReportMetric(float64(f.leaseExpiredRunning), "leases-expired-running")
	// Claims are no failure, but a worker that claimed keys and found no
	// job (a claim in a loop) shows here and nowhere else.
	b.ReportMetric(float64(f.claimed), "claims")
}

// seqpgWorker starts a seqpg worker whose handler calls done; without
// WithMaxConcurrency in opts, at its default concurrency.
func seqpgWorker(b testing.TB, pool *pgxpool.Pool, done func(*seqpg.Job), opts ...seqpg.Option) *seqpg.Worker {
	w, err := seqpg.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
		done(job)
		return nil
	}, opts...)
	must(b, err)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	b.Cleanup(func() {
		must(b, w.Close(context.Background()))
		<-ran
	})
	return w
}

type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return "bench" }

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
	done func(*river.Job[benchArgs])
}

func (w *benchWorker) Work(ctx context.Context, job *river.Job[benchArgs]) error {
	w.done(job)
	return nil
}

// riverClient starts a River client whose worker calls done.
func riverClient(b testing.TB, pool *pgxpool.Pool, done func(*river.Job[benchArgs]), cooldown time.Duration) *river.Client[pgx.Tx] {
	ws := river.NewWorkers()
	river.AddWorker(ws, &benchWorker{done: done})
	cfg := &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers: ws,
		Logger:  slog.New(slog.DiscardHandler),
	}
	if cooldown > 0 {
		cfg.FetchCooldown = cooldown
	}
	c, err := river.NewClient(riverpgxv5.New(pool), cfg)
	must(b, err)
	must(b, c.Start(context.Background()))
	b.Cleanup(func() { must(b, c.Stop(context.Background())) })
	return c
}

// counter counts handled jobs and signals when a target is reached.
type counter struct {
	mu     sync.Mutex
	n      int
	target int
	done   chan struct{}
}

func (c *counter) expect(n int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n, c.target, c.done = 0, n, make(chan struct{})
	return c.done
}

func (c *counter) add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.n == c.target {
		close(c.done)
	}
	return c.n
}

const (
	throughputJobs = 10_000
	orderedKeys    = 1_000
)

// BenchmarkThroughput: jobs/s from the commit of a batch of 10,000 jobs
// to the last one's completion; seqpg's in 1,000 ordered keys of 10,
// River's unordered. Each handler does nothing, so the queues' own costs
// are what is measured.
func BenchmarkThroughput(b *testing.B) {
	for _, run := range []struct {
		name string
		opts []seqpg.Option
	}{
		{"concurrency=default", nil},
		{"concurrency=100", []seqpg.Option{seqpg.WithMaxConcurrency(workers)}},
		{"concurrency=64", []seqpg.Option{seqpg.WithMaxConcurrency(64)}},
		{"concurrency=32", []seqpg.Option{seqpg.WithMaxConcurrency(32)}},
		{"concurrency=16", []seqpg.Option{seqpg.WithMaxConcurrency(16)}},
		{"concurrency=8", []seqpg.Option{seqpg.WithMaxConcurrency(8)}},
		{"concurrency=4", []seqpg.Option{seqpg.WithMaxConcurrency(4)}},
		{"concurrency=16/group=1", []seqpg.Option{seqpg.WithMaxConcurrency(16), seqpg.WithGroupCommit(1, time.Second)}},
		{"concurrency=100/batched=10", []seqpg.Option{seqpg.WithMaxConcurrency(workers), seqpg.WithBatchedCompletion(10)}},
		{"concurrency=100/batched=100", []seqpg.Option{seqpg.WithMaxConcurrency(workers), seqpg.WithBatchedCompletion(100)}},
		{"concurrency=default/batched=10", []seqpg.Option{seqpg.WithBatchedCompletion(10)}},
		{"concurrency=default/batched=100", []seqpg.Option{seqpg.WithBatchedCompletion(100)}},
		// After each round, the statistics autovacuum leaves when it
		// analyzes a drained queue (issue 48's stall): the next round's
		// statements are planned for an empty seqpg_jobs.
		{"stats=analyzed-empty/concurrency=default", nil},
		{"stats=analyzed-empty/concurrency=default/batched=10", []seqpg.Option{seqpg.WithBatchedCompletion(10)}},
	} {
		analyze := strings.HasPrefix(run.name, "stats=analyzed-empty/")
		b.Run("system=seqpg/keys=1000/"+run.name, func(b *testing.B) {
			pool := newDB(b)
			var c counter
			w := seqpgWorker(b, pool, func(*seqpg.Job) { c.add() }, append([]seqpg.Option{quiet}, run.opts...)...)
			ctx := context.Background()
			var total, cpu time.Duration
			for b.Loop() {
				done := c.expect(throughputJobs)
				tx, err := pool.Begin(ctx)
				must(b, err)
				for i := range throughputJobs {
					_, err := seqpg.Enqueue(ctx, tx, fmt.Sprint("key-", i%orderedKeys), nil)
					must(b, err)
				}
				start, cpu0 := time.Now(), cpuTime(pool)
				must(b, tx.Commit(ctx))
				waitOrDiagnose(b, pool, w, &c, done)
				total += time.Since(start)
				cpu += cpuTime(pool) - cpu0
				if analyze {
					analyzeEmpty(b, pool)
				}
			}
			b.ReportMetric(float64(throughputJobs*b.N)/total.Seconds(), "jobs/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(throughputJobs*b.N), "cpu-µs/job")
			var f failures
			f.add(w.Stats())
			f.report(b)
		})
	}
	for _, cooldown := range []time.Duration{0, time.Millisecond} {
		name := "system=river/unordered/cooldown=default"
		if cooldown > 0 {
			name = "system=river/unordered/cooldown=1ms"
		}
		b.Run(name, func(b *testing.B) {
			pool := newDB(b)
			var c counter
			client := riverClient(b, pool, func(*river.Job[benchArgs]) { c.add() }, cooldown)
			ctx := context.Background()
			params := make([]river.InsertManyParams, throughputJobs)
			for i := range params {
				params[i] = river.InsertManyParams{Args: benchArgs{N: i}}
			}
			var total, cpu time.Duration
			for b.Loop() {
				done := c.expect(throughputJobs)
				tx, err := pool.Begin(ctx)
				must(b, err)
				_, err = client.InsertManyFastTx(ctx, tx, params)
				must(b, err)
				start, cpu0 := time.Now(), cpuTime(pool)
				must(b, tx.Commit(ctx))
				<-done
				total += time.Since(start)
				cpu += cpuTime(pool) - cpu0
			}
			b.ReportMetric(float64(throughputJobs*b.N)/total.Seconds(), "jobs/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(throughputJobs*b.N), "cpu-µs/job")
		})
	}
}

// analyzeEmpty waits for the last completions of a round to commit and
// analyzes seqpg's tables, as autovacuum does once a queue has drained:
// seqpg_jobs is then recorded empty on all its pages.
func analyzeEmpty(b *testing.B, pool *pgxpool.Pool) {
	ctx := context.Background()
	for {
		var left bool
		must(b, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM seqpg_jobs)`).Scan(&left))
		if !left {
			break
		}
		time.Sleep(10 * time.Millisecond) // nothing signals the last commit
	}
	_, err := pool.Exec(ctx, `ANALYZE seqpg_jobs, seqpg_keys`)
	must(b, err)
}

// cpuTime is the CPU time used so far by this process and by the
// database's processes (its backends and background processes, as
// pg_stat_activity lists them, read from /proc): on a machine shared with
// other work, the CPU a job costs is steadier than the jobs a second. It
// is 0 where /proc cannot be read.
func cpuTime(pool *pgxpool.Pool) time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	total := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity`)
	if err != nil {
		return 0
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0
	}
	for _, pid := range pids {
		if d, ok := procCPU(pid); ok {
			total += d
		}
	}
	return total
}

// clockTicks is Linux's USER_HZ, the unit of /proc's CPU times (100 on
// every architecture Go runs Linux on).
const clockTicks = 100

// stallAfter is the window over which a throughput run's progress is
// checked: a job runs every 100 µs or so here, and a stall lasts up to a
// lease (30s).
const stallAfter = 3 * time.Second

// slowJobs is the fewest jobs a window of stallAfter must run, unless the
// run ends in it, for the run not to be described as stalled: 1,000
// jobs/s, a third of the slowest normal run seen here (3,000 jobs/s at a
// load average of 40). The three stalls seen so far ran at 305, 449 and
// 770 jobs/s over the whole run, not at 0 for a while, which a check for a
// window with no job at all would not have described.
const slowJobs = 3_000

// waitOrDiagnose waits for done; if a window of stallAfter runs fewer
// than slowJobs jobs, it logs, once, the keys that still have jobs, with
// their lease as the database and the worker see it, and what the worker
// and the database do (describeStall), so that a stall (a key waiting up
// to a lease, or every job slowed down) shows which path it took. The
// description takes a few seconds of the run's time.
func waitOrDiagnose(b *testing.B, pool *pgxpool.Pool, w *seqpg.Worker, c *counter, done <-chan struct{}) {
	tick := time.NewTicker(stallAfter)
	defer tick.Stop()
	last := 0
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		c.mu.Lock()
		n := c.n
		c.mu.Unlock()
		if n-last < slowJobs {
			describeKeys(b, pool, w, c, n-last)
			describeStall(pool, w)
			<-done
			return
		}
		last = n
	}
}

// describeKeys logs the worker's Stats and, for the first keys with jobs
// left, their lease as the database sees it.
func describeKeys(b *testing.B, pool *pgxpool.Pool, w *seqpg.Worker, c *counter, ran int) {
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
SELECT key, pending, paused, halted, lease_owner IS NOT NULL, lease_token,
	CASE WHEN isfinite(lease_until) THEN extract(epoch FROM lease_until - clock_timestamp()) END,
	CASE WHEN isfinite(run_after) THEN extract(epoch FROM run_after - clock_timestamp()) END,
	(SELECT count(*) FROM seqpg_jobs j WHERE j.key = k.key AND j.started_at IS NOT NULL)
FROM seqpg_keys k WHERE pending > 0 ORDER BY key LIMIT 20`)
	must(b, err)
	defer rows.Close()
	s := w.Stats()
	c.mu.Lock()
	left := c.target - c.n
	c.mu.Unlock()
	stallf("%d jobs in %v (fewer than %d), %d left; worker: leased %d, stats %+v", ran, stallAfter, slowJobs, left, s.Leased, s)
	for rows.Next() {
		var key string
		var pending, token, started int64
		var paused, halted, owned bool
		var leaseIn, readyIn *float64
		must(b, rows.Scan(&key, &pending, &paused, &halted, &owned, &token, &leaseIn, &readyIn, &started))
		stallf("key %s pending %d paused %v halted %v owned %v token %d lease ends in %s ready in %s, %d started",
			key, pending, paused, halted, owned, token, secs(leaseIn), secs(readyIn), started)
	}
	must(b, rows.Err())
}

func secs(f *float64) string {
	if f == nil {
		return "-inf"
	}
	return fmt.Sprintf("%.1fs", *f)
}

const pickups = 200

// BenchmarkPickup: an idle system's latency from an enqueue's commit to
// its handler's start, one job at a time; p50 and p95 of 200.
func BenchmarkPickup(b *testing.B) {
	report := func(b *testing.B, lat []time.Duration) {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
	}
	for _, run := range []struct {
		name string
		opt  seqpg.Option
	}{{"system=seqpg", quiet}, {"system=seqpg/batched=10", seqpg.WithBatchedCompletion(10)}} {
		b.Run(run.name, func(b *testing.B) {
			pool := newDB(b)
			started := make(chan time.Time, 1)
			w := seqpgWorker(b, pool, func(*seqpg.Job) { started <- time.Now() }, quiet, run.opt)
			ctx := context.Background()
			var lat []time.Duration
			for b.Loop() {
				for i := range pickups {
					tx, err := pool.Begin(ctx)
					must(b, err)
					_, err = seqpg.Enqueue(ctx, tx, fmt.Sprint("idle-", i%10), nil)
					must(b, err)
					t0 := time.Now()
					must(b, tx.Commit(ctx))
					lat = append(lat, (<-started).Sub(t0))
				}
			}
			report(b, lat)
			var f failures
			f.add(w.Stats())
			f.report(b)
		})
	}
	for _, cooldown := range []time.Duration{0, time.Millisecond} {
		name := "system=river/cooldown=default"
		if cooldown > 0 {
			name = "system=river/cooldown=1ms"
		}
		b.Run(name, func(b *testing.B) {
			pool := newDB(b)
			started := make(chan time.Time, 1)
			client := riverClient(b, pool, func(*river.Job[benchArgs]) { started <- time.Now() }, cooldown)
			ctx := context.Background()
			var lat []time.Duration
			for b.Loop() {
				for i := range pickups {
					tx, err := pool.Begin(ctx)
					must(b, err)
					_, err = client.InsertTx(ctx, tx, benchArgs{N: i}, nil)
					must(b, err)
					t0 := time.Now()
					must(b, tx.Commit(ctx))
					lat = append(lat, (<-started).Sub(t0))
				}
			}
			report(b, lat)
		})
	}
}

// BenchmarkDepth: the time per job of one key's first 500 jobs with 500
// or 100,500 jobs queued on it, from the first job's start to the 500th's,
// on a fresh database each time; the same time at both depths means that
// choosing a key's next job does not grow with its backlog (pg-boss's
// queue groups: 7.9 s against 59 ms per fetch at 200 keys × 1,000 jobs).
func BenchmarkDepth(b *testing.B) {
	const run = 500
	for _, depth := range []int{run, 100_000 + run} {
		b.Run(fmt.Sprint("system=seqpg/depth=", depth), func(b *testing.B) {
			ctx := context.Background()
			var per time.Duration
			var f failures
			for b.Loop() {
				b.StopTimer()
				pool := newDB(b)
				// The backlog, written straight into seqpg's tables as
				// Enqueue would leave them, to build 100,000 jobs fast.
				_, err := pool.Exec(ctx, `
WITH k AS (
	INSERT INTO seqpg_keys (key, last_seq, pending) VALUES ('deep', $1, $1) RETURNING key)
INSERT INTO seqpg_jobs (key, lane, seq) SELECT 'deep', 1, g FROM k, generate_series(1, $1) g`, depth)
				must(b, err)
				_, err = pool.Exec(ctx, `VACUUM ANALYZE seqpg_jobs`)
				must(b, err)
				b.StartTimer()
				var c counter
				done := c.expect(run)
				var first time.Time
				w, err := seqpg.NewWorker(pool, func(ctx context.Context, tx pgx.Tx, job *seqpg.Job) error {
					n := c.add()
					if n == 1 {
						first = time.Now()
					}
					if n >= run {
						<-ctx.Done() // hold the key until Close
					}
					return nil
				}, quiet, seqpg.WithMaxConcurrency(1))
				must(b, err)
				ran := make(chan error, 1)
				go func() { ran <- w.Run(context.Background()) }()
				<-done
				per += time.Since(first) / (run - 1)
				cctx, cancel := context.WithTimeout(ctx, time.Millisecond)
				w.Close(cctx)
				cancel()
				<-ran
				f.add(w.Stats())
				pool.Close()
			}
			b.ReportMetric(float64(per.Microseconds())/float64(b.N), "µs/job")
			f.report(b)
		})
	}
}

// BenchmarkClaim: the time of one claim of 16 keys among 100 ready ones,
// with 1,000 or 100,000 idle keys (a row each in seqpg_keys: nothing
// deletes an idle key's row), under each plan of the prepared statement
// and under PostgreSQL's choice between them (auto, what a worker gets),
// with the statistics an ANALYZE leaves when it ran while a burst had
// queued a job on every key. The same time at both sizes means a claim
// reads the keys it takes, not every key ever enqueued. Each claim is
// rolled back, so that every one finds the same keys ready.
func BenchmarkClaim(b *testing.B) {
	const ready, room = 100, 16
	for _, idle := range []int{1_000, 100_000} {
		for _, mode := range []string{"auto", "force_custom_plan", "force_generic_plan"} {
			b.Run(fmt.Sprintf("idle=%d/stats=analyzed-during-a-burst/plan=%s", idle, strings.TrimSuffix(strings.TrimPrefix(mode, "force_"), "_plan")), func(b *testing.B) {
				ctx := context.Background()
				pool := newDB(b)
				for _, sql := range []string{
					`INSERT INTO seqpg_keys (key, last_seq, pending) SELECT 'idle-' || i, 1, 1 FROM generate_series(1, $1) i`,
					`ANALYZE seqpg_keys`,
					`UPDATE seqpg_keys SET pending = 0`,
					`INSERT INTO seqpg_keys (key, last_seq, pending) SELECT 'ready-' || i, 1, 1 FROM generate_series(1, $1) i`,
					`VACUUM seqpg_keys`,
				} {
					var args []any
					if strings.Contains(sql, "$1") {
						args = []any{idle}
						if strings.Contains(sql, "ready-") {
							args = []any{ready}
						}
					}
					_, err := pool.Exec(ctx, sql, args...)
					must(b, err)
				}
				conn, err := pool.Acquire(ctx)
				must(b, err)
				defer conn.Release()
				_, err = conn.Exec(ctx, `SET plan_cache_mode = `+mode)
				must(b, err)
				defer conn.Exec(ctx, `RESET plan_cache_mode`)
				for b.Loop() {
					tx, err := conn.Begin(ctx)
					must(b, err)
					rows, err := tx.Query(ctx, pgclaim.SQL, "bench", room, 30000.0)
					must(b, err)
					n := 0
					for rows.Next() {
						n++
					}
					must(b, rows.Err())
					if n != room {
						b.Fatalf("claimed %d keys; want %d", n, room)
					}
					must(b, tx.Rollback(ctx))
				}
			})
		}
	}
}
