#!/usr/bin/env bash
# The comparative suite.
#
#   bash bench/run.sh savina [REPS]   the Savina table alone: every workload on
#                                     seqsched, protoactor-go and naive-chan,
#                                     REPS interleaved times (default 7); about
#                                     2 minutes on 2 cores
#   bash bench/run.sh [COUNT]         every benchmark COUNT times (default 5),
#                                     benchstat tables with the implementations
#                                     side by side, the strict target check and
#                                     the Savina table; results in
#                                     bench/results.txt (an hour or more)
set -euo pipefail
cd "$(dirname "$0")"
savina() {
	go test -run '^TestSavinaTable$' -savina.reps "$1" -v -count 1 -timeout 60m . |
		sed -n '/^Savina subset/,/^$/p; /^|/p; /FAIL/p'
}
if [ "${1:-}" = savina ]; then
	savina "${2:-7}"
	exit
fi
count="${1:-5}"
go test -run '^$' -bench . -benchmem -count "$count" -timeout 120m . | tee results.txt
go run golang.org/x/perf/cmd/benchstat@latest -col /impl results.txt
go test -run TestTargets -v -count 1 .
savina 7
