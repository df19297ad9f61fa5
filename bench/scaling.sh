#!/usr/bin/env bash
# Scaling: BenchmarkScaling (10,000 keys, as many producers as Ps, Post by
# key, no-op and 2 µs tasks, with and without WithMaxConcurrency(P)) at
# GOMAXPROCS 1, 2, 4, 8 and 16, then the speed-up over GOMAXPROCS=1 per
# core count (medians of COUNT runs), then the top symbols of the CPU
# profile and of the mutex profile (contended locks) for no-op tasks at the
# highest GOMAXPROCS measured. A GOMAXPROCS above the machine's CPUs is
# "not measured". About 2 minutes on 2 cores with the default COUNT.
# Usage: bash bench/scaling.sh [COUNT]   (default 3)
set -euo pipefail
cd "$(dirname "$0")"
count="${1:-3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/bench.test" .
cpus=$(nproc)
echo "== BenchmarkScaling, $count runs, $cpus CPUs"
"$tmp/bench.test" -test.run '^$' -test.bench '^BenchmarkScaling$' -test.benchtime 5x -test.count "$count" |
	tee "$tmp/runs.txt" | grep '^BenchmarkScaling' || true

# "task limit procs tasks/s" per run, then the median per task, limit and procs.
awk '/^BenchmarkScaling\// {
	split($1, p, "/"); sub(/^procs=/, "", p[2]); sub(/^task=/, "", p[3]); sub(/^limit=/, "", p[4]); sub(/-[0-9]+$/, "", p[4])
	for (i = 2; i < NF; i++) if ($(i + 1) == "tasks/s") v = $i
	print p[3], (p[4] == "none" ? "none" : "P"), p[2], v
}' "$tmp/runs.txt" | sort -k1,1 -k2,2 -k3,3n -k4,4g |
	awk '{ k = $1 " " $2 " " $3; n[k]++; vals[k, n[k]] = $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
	END { for (i = 1; i <= m; i++) { k = order[i]; c = n[k]; print k, (c % 2 ? vals[k, (c + 1) / 2] : (vals[k, c / 2] + vals[k, c / 2 + 1]) / 2) } }' \
	>"$tmp/medians.txt"

echo
echo "== speed-up over GOMAXPROCS=1 (median tasks/s, and tasks/s at P / tasks/s at 1)"
printf '%-10s %-6s' task limit
for p in 1 2 4 8 16; do printf ' %22s' "P=$p"; done
echo
for task in 0s 2µs; do
	for limit in none P; do
		base=$(awk -v t="$task" -v l="$limit" '$1 == t && $2 == l && $3 == 1 { print $4 }' "$tmp/medians.txt")
		[ -n "$base" ] || continue
		printf '%-10s %-6s' "${task/µ/u}" "$limit"
		for p in 1 2 4 8 16; do
			v=$(awk -v t="$task" -v l="$limit" -v p="$p" '$1 == t && $2 == l && $3 == p { print $4 }' "$tmp/medians.txt")
			if [ -z "$v" ]; then
				printf ' %22s' "not measured"
			else
				printf ' %22s' "$(awk -v v="$v" -v b="$base" 'BEGIN { printf "%.3gM/s %.2fx", v / 1e6, v / b }')"
			fi
		done
		echo
	done
done

top=1
for p in 1 2 4 8 16; do [ "$p" -le "$cpus" ] && top=$p; done
echo
echo "== profiles: no-op tasks, no limit, GOMAXPROCS=$top (20 operations of 100,000 tasks)"
"$tmp/bench.test" -test.run '^$' -test.bench "^BenchmarkScaling\$/^procs=$top\$/^task=0s\$/^limit=none\$" \
	-test.benchtime 20x -test.cpuprofile "$tmp/cpu.prof" -test.mutexprofile "$tmp/mutex.prof" >/dev/null
echo "-- CPU, top 15 by own time"
go tool pprof -top -nodecount 15 "$tmp/bench.test" "$tmp/cpu.prof" 2>/dev/null | sed -n '/flat%/,$p'
echo "-- CPU, lock, atomic and scheduler symbols (where cores would contend)"
go tool pprof -top "$tmp/bench.test" "$tmp/cpu.prof" 2>/dev/null | sed -n '/flat%/,$p' |
	grep -E 'lock|futex|atomic|Mutex|osyield|procyield|seqsched\.\(\*Scheduler|takeToken|release|exit' | head -12 || true
echo "-- mutex profile (contended locks, by time waited, with their callers), top 12"
# By cumulative wait, without the frames every worker has (the benchmark's
# goroutines, the worker identity's tag frames).
go tool pprof -top -cum "$tmp/bench.test" "$tmp/mutex.prof" 2>/dev/null | sed -n '/flat%/,$p' |
	grep -v -E 'bench_test\.|WaitGroup|seqsched\.(tagEnd|tagged|tag[0-9A-F])$' | head -13 >"$tmp/mutex.txt"
if [ "$(wc -l <"$tmp/mutex.txt")" -gt 1 ]; then cat "$tmp/mutex.txt"; else echo "(no contended lock was sampled)"; fi
