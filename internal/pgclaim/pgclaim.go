// Package pgclaim holds seqpg's claim statement, the one statement that
// seqpg and its benchmark's stall diagnosis (seqpg/bench) both need: the
// diagnosis explains its plans, and must explain the statement seqpg runs,
// not a copy of it.
package pgclaim

// SQL claims up to $2 ready keys for worker $1 with a lease of $3
// milliseconds, oldest run_after first, skipping keys another worker has
// locked, and returns each key and its new fencing token.
const SQL = `
WITH c AS (
	SELECT key FROM seqpg_keys
	WHERE pending > 0 AND NOT paused AND NOT halted
		AND run_after <= clock_timestamp() AND lease_until < clock_timestamp()
	ORDER BY run_after LIMIT $2
	FOR UPDATE SKIP LOCKED)
UPDATE seqpg_keys k SET lease_owner = $1, lease_token = nextval('seqpg_lease_token'),
	lease_until = clock_timestamp() + $3 * interval '1 millisecond',
	run_after = clock_timestamp() + $3 * interval '1 millisecond'
FROM c WHERE k.key = c.key
RETURNING k.key, k.lease_token`
