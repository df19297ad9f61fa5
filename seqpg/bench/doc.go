// Package bench measures seqpg against River's open-source edition on the
// same PostgreSQL, side by side in one run: throughput (seqpg with 1,000
// ordered keys against River's unordered jobs), an idle key's pickup
// latency, and the cost of a key's next job at depth. It is its own module
// so that River stays out of seqpg's go.mod. See seqpg/BENCHMARKS.md.
//
//	cd seqpg/bench && go test -run '^$' -bench . -benchtime 3x
package bench
