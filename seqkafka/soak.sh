#!/usr/bin/env bash
# Soak of seqkafka's property test (property_test.go): its fixed seeds and
# SEEDS random ones (default 100), under -race, each a group of members on
# an in-process kfake cluster with members added, killed and fenced. A
# seed takes 2-7 s on 2 cores, so the default soak takes about ten
# minutes; run it beside other load to find what a busy CI machine finds.
#
# A failed seed prints the command that replays it; add it to
# propertySeeds in property_test.go, with what it found, so that it runs
# every time. Extra arguments go to go test (say, -count=5 or -failfast).
set -euo pipefail
cd "$(dirname "$0")"
exec go test -race -count=1 -timeout=0 -run '^TestPropertyNoCommitPassesAnIncompleteOffset$' -seqkafka.seeds="${SEEDS:-100}" "$@" .
