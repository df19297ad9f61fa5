#!/usr/bin/env bash
# Scaling: BenchmarkScaling (as many producers as Ps, each counting its own
# tasks; loads keys, churn, hot and handles; no-op and 2 µs tasks; with and
# without WithMaxConcurrency(P)) at GOMAXPROCS 1, 2, 4, 8 and 16, then the
# speed-up over GOMAXPROCS=1 per core count (medians of COUNT runs), then
# the CPU profile, by function and by line (-lines: token operations and
# other inlined calls show at their own lines), and the mutex profile
# (contended locks) for no-op tasks at the highest GOMAXPROCS measured. A
# GOMAXPROCS above the machine's CPUs is "not measured"; on a 16-core
# machine the script runs unchanged. About 4 minutes on 2 cores with the
# default COUNT.
# Usage: bash bench/scaling.sh [COUNT [LOAD]]   (default 3 keys)
set -euo pipefail
cd "$(dirname "$0")"
count="${1:-3}"
profiled="${2:-keys}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/bench.test" .
cpus=$(nproc)
echo "== BenchmarkScaling, $count runs, $cpus CPUs"
"$tmp/bench.test" -test.run '^$' -test.bench '^BenchmarkScaling$' -test.benchtime 5x -test.count "$count" |
	tee "$tmp/runs.txt" | grep '^BenchmarkScaling' || true

# "load task limit procs tasks/s" per run, then the median per load, task,
# limit and procs.
awk '/^BenchmarkScaling\// {
	split($1, p, "/"); sub(/^procs=/, "", p[2]); sub(/^load=/, "", p[3]); sub(/^task=/, "", p[4])
	sub(/^limit=/, "", p[5]); sub(/-[0-9]+$/, "", p[5])
	for (i = 2; i < NF; i++) if ($(i + 1) == "tasks/s") v = $i
	print p[3], p[4], (p[5] == "none" ? "none" : "P"), p[2], v
}' "$tmp/runs.txt" | sort -k1,1 -k2,2 -k3,3 -k4,4n -k5,5g |
	awk '{ k = $1 " " $2 " " $3 " " $4; n[k]++; vals[k, n[k]] = $5; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
	END { for (i = 1; i <= m; i++) { k = order[i]; c = n[k]; print k, (c % 2 ? vals[k, (c + 1) / 2] : (vals[k, c / 2] + vals[k, c / 2 + 1]) / 2) } }' \
	>"$tmp/medians.txt"

echo
echo "== speed-up over GOMAXPROCS=1 (median tasks/s, and tasks/s at P / tasks/s at 1)"
printf '%-8s %-6s %-6s' load task limit
for p in 1 2 4 8 16; do printf ' %20s' "P=$p"; done
echo
for load in keys churn hot handles; do
	for task in 0s 2µs; do
		for limit in none P; do
			base=$(awk -v d="$load" -v t="$task" -v l="$limit" '$1 == d && $2 == t && $3 == l && $4 == 1 { print $5 }' "$tmp/medians.txt")
			[ -n "$base" ] || continue
			printf '%-8s %-6s %-6s' "$load" "${task/µ/u}" "$limit"
			for p in 1 2 4 8 16; do
				v=$(awk -v d="$load" -v t="$task" -v l="$limit" -v p="$p" '$1 == d && $2 == t && $3 == l && $4 == p { print $5 }' "$tmp/medians.txt")
				if [ -z "$v" ]; then
					printf ' %20s' "not measured"
				else
					printf ' %20s' "$(awk -v v="$v" -v b="$base" 'BEGIN { printf "%.3gM/s %.2fx", v / 1e6, v / b }')"
				fi
			done
			echo
		done
	done
done

top=1
for p in 1 2 4 8 16; do [ "$p" -le "$cpus" ] && top=$p; done
echo
echo "== profiles: load $profiled, no-op tasks, no limit, GOMAXPROCS=$top (20 operations of 100,000 tasks)"
"$tmp/bench.test" -test.run '^$' -test.bench "^BenchmarkScaling\$/^procs=$top\$/^load=$profiled\$/^task=0s\$/^limit=none\$" \
	-test.benchtime 20x -test.cpuprofile "$tmp/cpu.prof" -test.mutexprofile "$tmp/mutex.prof" >/dev/null
echo "-- CPU, top 15 functions by own time"
go tool pprof -top -nodecount 15 "$tmp/bench.test" "$tmp/cpu.prof" 2>/dev/null | sed -n '/flat%/,$p'
echo "-- CPU, top 25 lines by own time (-lines: inlined calls at their own lines)"
go tool pprof -top -lines -nodecount 25 "$tmp/bench.test" "$tmp/cpu.prof" 2>/dev/null | sed -n '/flat%/,$p'
echo "-- CPU, lines of lock, atomic and scheduler symbols (where cores would contend)"
go tool pprof -top -lines "$tmp/bench.test" "$tmp/cpu.prof" 2>/dev/null | sed -n '/flat%/,$p' |
	grep -E 'lock|futex|atomic|Mutex|osyield|procyield|token|Token|live|seqsched\.\(\*Scheduler' | head -15 || true
echo "-- mutex profile (contended locks, by time waited, with their callers), top 12"
go tool pprof -top -cum "$tmp/bench.test" "$tmp/mutex.prof" 2>/dev/null | sed -n '/flat%/,$p' |
	grep -v -E 'bench_test\.|testing\.' | head -13 >"$tmp/mutex.txt"
if [ "$(wc -l <"$tmp/mutex.txt")" -gt 1 ]; then cat "$tmp/mutex.txt"; else echo "(no contended lock was sampled)"; fi
