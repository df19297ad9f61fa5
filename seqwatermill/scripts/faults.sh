#!/usr/bin/env bash
# The fault test with more seeds and longer faults than the default run:
#   seqwatermill/scripts/faults.sh [seeds] [chaos-per-seed]
# Each seed is printed with the command that replays it; a failing one
# joins its deployment's regression seeds in faults_test.go.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -race -count=1 -timeout 120m -run '^TestFaults' -v \
	-seqwatermill.seeds="${1:-20}" -seqwatermill.chaos="${2:-10s}" . | grep -v 'level='
