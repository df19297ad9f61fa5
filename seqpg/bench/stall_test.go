package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/seqsched/seqsched/internal/pgclaim"
	"github.com/seqsched/seqsched/seqpg"
)

// The description of a stall (waitOrDiagnose): where the CPU goes while
// no job runs, the database's view of its sessions and tables, the plan
// of the claim, and the worker's goroutines, so that one occurrence names
// its path.

// stallf writes a line of a stall's description to standard error, not
// to the benchmark's log: the testing package keeps only the first ten
// lines a benchmark logs, which cut the earlier descriptions short.
func stallf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "stall: "+format+"\n", args...)
}

// cpuSample is the CPU time so far of this process and of each of the
// database's processes, by pid.
type cpuSample struct {
	at    time.Time
	self  time.Duration
	procs map[int32]time.Duration
}

func sampleCPU(pids []int32) cpuSample {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := cpuSample{at: time.Now(), self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), procs: map[int32]time.Duration{}}
	for _, pid := range pids {
		if d, ok := procCPU(pid); ok {
			s.procs[pid] = d
		}
	}
	return s
}

// procCPU reads a process's user and system time from /proc: the fields
// after the command, which is in parentheses; utime and stime are the
// 14th and 15th of the line, in clock ticks.
func procCPU(pid int32) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, false
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks, true
}

// describeStall logs what the database and the process do during a
// stall: one second of CPU by process, pg_stat_activity, the claim's
// plans, the tables' dead rows and vacuums, and the goroutines.
func describeStall(pool *pgxpool.Pool, w *seqpg.Worker) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	logRows := func(title, sql string, args ...any) {
		rows, err := pool.Query(ctx, sql, args...)
		if err != nil {
			stallf("%s: %v", title, err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				stallf("%s: %v", title, err)
				return
			}
			parts := make([]string, len(vals))
			for i, v := range vals {
				parts[i] = fmt.Sprintf("%s=%v", rows.FieldDescriptions()[i].Name, v)
			}
			stallf("%s: %s", title, strings.Join(parts, " "))
		}
		if err := rows.Err(); err != nil {
			stallf("%s: %v", title, err)
		}
	}

	// CPU over one second, by process.
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity`)
	var pids []int32
	if err == nil {
		pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	}
	if err != nil {
		stallf("pids: %v", err)
	}
	st0, s0 := w.Stats(), sampleCPU(pids)
	time.Sleep(time.Second) // a sampling window, not a synchronisation
	st1, s1 := w.Stats(), sampleCPU(pids)
	wall := s1.at.Sub(s0.at)
	var pg time.Duration
	var busy []string
	for pid, t1 := range s1.procs {
		d := t1 - s0.procs[pid]
		pg += d
		if d > 0 {
			busy = append(busy, fmt.Sprintf("%d:%v", pid, d))
		}
	}
	stallf("cpu over %v: benchmark process %v, database %v (busy pids %s)",
		wall.Round(time.Millisecond), s1.self-s0.self, pg, strings.Join(busy, " "))
	// A worker that claims keys and finds no job to run (a claim that
	// spins) moves Claimed and nothing else.
	stallf("over that second the worker claimed %d keys, completed %d jobs, submitted %d steps and ran %d; leased %d, scheduler running %d, queued %d",
		st1.Claimed-st0.Claimed, st1.Completed-st0.Completed,
		st1.Scheduler.Submitted-st0.Scheduler.Submitted, st1.Scheduler.Completed-st0.Scheduler.Completed,
		st1.Leased, st1.Scheduler.Running, st1.Scheduler.Queued)

	logRows("activity", `
SELECT pid, backend_type, state, wait_event_type, wait_event,
	extract(epoch FROM clock_timestamp() - xact_start)::float8 AS xact_s,
	extract(epoch FROM clock_timestamp() - query_start)::float8 AS query_s,
	left(regexp_replace(query, '\s+', ' ', 'g'), 120) AS query
FROM pg_stat_activity WHERE datname = current_database() OR backend_type <> 'client backend'
ORDER BY pid`)
	logRows("tables", `
SELECT relname, n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, seq_scan, idx_scan,
	last_autovacuum, last_autoanalyze, autovacuum_count, autoanalyze_count
FROM pg_stat_user_tables WHERE relname IN ('seqpg_keys', 'seqpg_jobs')`)
	logRows("keys", `
SELECT count(*) FILTER (WHERE pending > 0) AS with_jobs,
	count(*) FILTER (WHERE pending > 0 AND lease_until >= clock_timestamp()) AS leased,
	count(*) FILTER (WHERE pending > 0 AND lease_until < clock_timestamp() AND run_after <= clock_timestamp()) AS claimable,
	count(*) FILTER (WHERE pending > 0 AND run_after > clock_timestamp()) AS not_ready,
	count(*) FILTER (WHERE lease_owner IS NOT NULL) AS owned
FROM seqpg_keys`)
	// The claim's plans: the custom one, for the parameters in use (a
	// hundred keys), and the generic one that a prepared statement may
	// switch to after five executions. The statement is seqpg's own
	// (internal/pgclaim).
	claim := pgclaim.SQL
	if conn, err := pool.Acquire(ctx); err != nil {
		stallf("claim plan: %v", err)
	} else {
		c := conn.Conn()
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			_, err := c.Exec(ctx, `SET plan_cache_mode = `+mode)
			if err == nil {
				_, err = c.Exec(ctx, `PREPARE stall_claim(text, int, float8) AS `+claim)
			}
			if err != nil {
				stallf("claim plan %s: %v", mode, err)
				continue
			}
			rows, err := c.Query(ctx, `EXPLAIN EXECUTE stall_claim('explain', 100, 30000)`, pgx.QueryExecModeSimpleProtocol)
			if err == nil {
				var lines []string
				lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
				stallf("claim plan %s:\n%s", mode, strings.Join(lines, "\n"))
			}
			if err != nil {
				stallf("claim plan %s: %v", mode, err)
			}
			c.Exec(ctx, `DEALLOCATE stall_claim`)
		}
		c.Exec(ctx, `RESET plan_cache_mode`)
		conn.Release()
	}

	// Where the benchmark process burns CPU, if it does.
	if dir := os.Getenv("SEQPG_STALL_PROFILE_DIR"); dir != "" {
		if f, err := os.CreateTemp(dir, "stall-cpu-*.pprof"); err == nil {
			if err := pprof.StartCPUProfile(f); err == nil {
				time.Sleep(2 * time.Second) // the profile's window
				pprof.StopCPUProfile()
				stallf("cpu profile of 2s in %s", f.Name())
			}
			f.Close()
		}
	}

	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 1)
	stallf("goroutines:\n%s", buf.String())
}
