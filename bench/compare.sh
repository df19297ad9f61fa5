#!/usr/bin/env bash
# Compares two versions of the core side by side: builds bench's test binary
# against REV (in a temporary git worktree) and against the working tree,
# then runs the round trip, stream and many benchmarks and the wake-up
# workloads (Savina's pingpong and threadring) ROUNDS times, alternating the
# two binaries, and prints each benchmark's median ns/op.
# Usage: bash bench/compare.sh REV [ROUNDS]   (ROUNDS defaults to 6)
set -euo pipefail
cd "$(dirname "$0")/.."
rev="$1"
rounds="${2:-6}"
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add -q --detach "$tmp/old" "$rev"
(cd "$tmp/old/bench" && go test -c -o "$tmp/old.test" .)
(cd bench && go test -c -o "$tmp/new.test" .)
run() {
	"$1" -test.run '^$' -test.bench 'RoundTrip/impl=(floor-goroutine|seqsched-await|seqsched-hgo)$' -test.benchmem -test.benchtime 0.5s | grep ^Benchmark
	"$1" -test.run '^$' -test.bench 'Stream/n=.*/impl=(floor-chan-alloc|seqsched-hpost|seqsched-hgo)$' -test.benchmem -test.benchtime 0.5s | grep ^Benchmark
	"$1" -test.run '^$' -test.bench 'Many/sessions=1000$/producers=2/impl=(naive-chan|seqsched-post)$' -test.benchmem -test.benchtime 0.5s | grep ^Benchmark
	"$1" -test.run '^$' -test.bench 'Savina/workload=(pingpong|threadring)/impl=(seqsched|naive-chan)$' -test.benchmem -test.benchtime 3x | grep ^Benchmark
}
for _ in $(seq "$rounds"); do
	(cd bench && run "$tmp/old.test") | sed 's/^/old /'
	(cd bench && run "$tmp/new.test") | sed 's/^/new /'
done | awk '{ v[$1" "$2] = v[$1" "$2] " " $4 } END { for (k in v) print k, v[k] }' | sort -k2 |
	while read -r which name values; do
		median=$(printf '%s\n' $values | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
		printf '%-4s %-70s %12s ns/op\n' "$which" "$name" "$median"
	done
