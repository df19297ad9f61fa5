// Package pgclaim holds seqpg's claim statement, the one statement that
// seqpg and its benchmark's stall diagnosis (seqpg/bench) both need: the
// diagnosis explains its plans, and must explain the statement seqpg runs,
// not a copy of it.
package pgclaim

// SQL claims up to $2 ready keys for worker $1 with a lease of $3
// milliseconds, oldest run_after first, skipping keys another worker has
// locked, and returns each key and its new fencing token.
//
// The keys are chosen once, by the sub-select, an init plan that scans
// the ready index and locks what it takes; the update then finds each by
// its primary key. Joined to the update instead (a CTE), they let the
// planner scan the whole table for them, a row per key ever enqueued,
// when it expects many ready keys: after an ANALYZE taken while a burst
// had queued a job on most keys (the generic plan, or any plan for a
// large room), 20,000 rows read to claim 3 keys (idlekeys_test.go).
// The keys' row locks, taken by the sub-select, are held until the
// statement's transaction ends, so no other claim can take them between
// the sub-select and the update; a key claimed and committed by another
// worker before the sub-select locks it is re-checked by FOR UPDATE on
// its new version, and skipped.
const SQL = `
UPDATE seqpg_keys k SET lease_owner = $1, lease_token = nextval('seqpg_lease_token'),
	lease_until = clock_timestamp() + $3 * interval '1 millisecond',
	run_after = clock_timestamp() + $3 * interval '1 millisecond'
WHERE k.key = ANY (ARRAY(
	SELECT key FROM seqpg_keys
	WHERE pending > 0 AND NOT paused AND NOT halted
		AND run_after <= clock_timestamp() AND lease_until < clock_timestamp()
	ORDER BY run_after LIMIT $2
	FOR UPDATE SKIP LOCKED))
RETURNING k.key, k.lease_token`
