#!/usr/bin/env bash
# The property test with more seeds and longer faults than the default run:
#   seqpg/scripts/property.sh [seeds] [chaos-per-seed]
# Each seed is printed; a failing one reruns with -seqpg.seed=N, and joins
# regressionSeeds in property_test.go.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -race -count=1 -timeout 120m -run '^TestPropertyWorkersKilledAndFrozen$' -v \
	-seqpg.seeds="${1:-20}" -seqpg.chaos="${2:-10s}" . | grep -v ' WARN \| ERROR '
