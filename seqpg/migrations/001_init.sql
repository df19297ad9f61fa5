-- seqpg schema, version 1.
--
-- seqpg_keys is the head-of-key table: one row per key, holding the key's
-- sequence counter, its backlog size, its durable control state and its
-- lease. Enqueue locks the row (an upsert) to take the next sequence
-- number, so that sequence order is commit order per key.
CREATE TABLE seqpg_keys (
	key         text PRIMARY KEY,
	last_seq    bigint NOT NULL DEFAULT 0,
	pending     bigint NOT NULL DEFAULT 0,
	paused      boolean NOT NULL DEFAULT false,
	halted      boolean NOT NULL DEFAULT false,
	halt_error  text,
	run_after   timestamptz NOT NULL DEFAULT '-infinity', -- not claimable before: a backoff's end, or a held key's lease end
	lease_owner text,
	lease_token bigint NOT NULL DEFAULT 0,
	lease_until timestamptz NOT NULL DEFAULT '-infinity'
);

-- The keys a worker may claim: with jobs, not paused, not halted.
CREATE INDEX seqpg_keys_ready ON seqpg_keys (run_after)
	WHERE pending > 0 AND NOT paused AND NOT halted;

-- Fencing tokens: every lease of every key gets a new, larger one.
CREATE SEQUENCE seqpg_lease_token;

CREATE TABLE seqpg_jobs (
	id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	key         text NOT NULL,
	lane        smallint NOT NULL,           -- 0 High, 1 Normal
	seq         bigint NOT NULL,             -- per key, in commit order
	kind        text NOT NULL DEFAULT '',
	payload     bytea,
	tag         text,                        -- Replace's tag
	attempt     integer NOT NULL DEFAULT 0,  -- failed attempts in this budget
	started_at  timestamptz,                 -- first failed attempt; Replace skips started jobs
	enqueued_at timestamptz NOT NULL DEFAULT now(),
	last_error  text
);

-- A key's next job is the first row of this index under the key: the same
-- cost with one job or a hundred thousand behind it.
CREATE UNIQUE INDEX seqpg_jobs_order ON seqpg_jobs (key, lane, seq);

CREATE TABLE seqpg_dead (
	id          bigint PRIMARY KEY,
	key         text NOT NULL,
	lane        smallint NOT NULL,
	seq         bigint NOT NULL,
	kind        text NOT NULL,
	payload     bytea,
	tag         text,
	attempts    integer NOT NULL,
	enqueued_at timestamptz NOT NULL,
	failed_at   timestamptz NOT NULL DEFAULT now(),
	error       text NOT NULL
);
CREATE INDEX seqpg_dead_key ON seqpg_dead (key, seq);
