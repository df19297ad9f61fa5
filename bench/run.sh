#!/usr/bin/env bash
# Runs the full comparative suite: every benchmark COUNT times (default 5),
# then the strict target check, then benchstat tables with the
# implementations side by side. Results go to bench/results.txt.
# Usage: bash bench/run.sh [COUNT]
set -euo pipefail
cd "$(dirname "$0")"
count="${1:-5}"
go test -run '^$' -bench . -benchmem -count "$count" -timeout 120m . | tee results.txt
go run golang.org/x/perf/cmd/benchstat@latest -col /impl results.txt
go test -run TestTargets -v -count 1 .
