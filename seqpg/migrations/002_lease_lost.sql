-- seqpg schema, version 2.
--
-- seqpg_lease_lost raises the error a job's completion meets when the
-- worker's lease on the key is no longer its own. A completion is sent in
-- one round trip with its commit and the read of the key's next job; an
-- error is what stops the statements after it (the commit among them)
-- from running, where a statement that changed no row would not.
CREATE FUNCTION seqpg_lease_lost() RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
	RAISE EXCEPTION 'seqpg: lease lost' USING ERRCODE = 'SQ001';
END
$$;
