#!/usr/bin/env bash
# Soak of seqjetstream's property tests (property_test.go): each property
# runs its regression seeds and SEEDS random ones (default 200), under
# -race, with real instances killed, closed and stalled on an embedded
# nats-server. A run takes 5-15 s on 2 cores, so the default soak takes
# about two to three hours; SEEDS=20 takes about a quarter of an hour.
#
# A failed run prints its seed and the command that replays it; add the
# seed to regressions in property_test.go, with what it found, so that it
# runs every time. Extra arguments go to go test (say, -run to pick one
# property, or -failfast).
set -euo pipefail
cd "$(dirname "$0")"
exec go test -race -count=1 -timeout=0 -run '^Test(Partitioned|Balanced)Instances' -seeds="${SEEDS:-200}" "$@" .
