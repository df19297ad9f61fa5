package seqpg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The per-key controls below are durable: they are rows in seqpg_keys,
// seen by every worker, kept across restarts. Each takes a DBTX, so it can
// run on its own (a pool) or inside the caller's transaction (a pgx.Tx),
// taking effect when that commits. A running job is never interrupted:
// each control takes effect at the key's next job. They touch one key and
// wait for no other.

// Pause stops key from starting jobs until Resume, on every worker; its
// jobs stay queued and Enqueue goes on adding to it. A key can be paused
// before it has jobs. Pausing a paused key does nothing.
func Pause(ctx context.Context, db DBTX, key string) error {
	if err := checkArgs(ctx, key); err != nil {
		return err
	}
	_, err := db.Exec(ctx, `
INSERT INTO seqpg_keys AS k (key, paused) VALUES ($1, true)
ON CONFLICT (key) DO UPDATE SET paused = true`, key)
	if err != nil {
		return fmt.Errorf("seqpg: pause: %w", err)
	}
	return nil
}

// Resume lets key start jobs again after Pause, or after its worker
// halted it (WithHaltOnError): the job that halted it runs again, with a
// new budget of attempts. Workers are notified. Resuming a key that is
// neither paused nor halted does nothing.
func Resume(ctx context.Context, db DBTX, key string) error {
	if err := checkArgs(ctx, key); err != nil {
		return err
	}
	_, err := db.Exec(ctx, `
WITH k AS (
	UPDATE seqpg_keys k SET paused = false, halted = false, halt_error = NULL
	FROM (SELECT halted FROM seqpg_keys WHERE key = $1) old
	WHERE k.key = $1 RETURNING k.key, old.halted AS was_halted),
j AS (
	UPDATE seqpg_jobs j SET attempt = 0 FROM k
	WHERE k.was_halted AND j.key = k.key AND j.attempt > 0)
SELECT pg_notify($2, '') FROM k`, key, notifyChannel)
	if err != nil {
		return fmt.Errorf("seqpg: resume: %w", err)
	}
	return nil
}

// Discard deletes key's jobs that are not running (its backlog, and the
// job that halted it) and lifts a halt; a running job finishes. It
// returns how many jobs it deleted. A paused key stays paused. Discarded
// jobs are gone, not dead-lettered.
func Discard(ctx context.Context, db DBTX, key string) (int64, error) {
	if err := checkArgs(ctx, key); err != nil {
		return 0, err
	}
	var n int64
	err := db.QueryRow(ctx, `
WITH k AS (
	SELECT key FROM seqpg_keys WHERE key = $1 FOR UPDATE),
d AS (
	DELETE FROM seqpg_jobs WHERE id = ANY (ARRAY(
		SELECT j.id FROM seqpg_jobs j WHERE j.key = $1 AND EXISTS (SELECT 1 FROM k) FOR UPDATE OF j SKIP LOCKED))
	RETURNING 1),
u AS (
	UPDATE seqpg_keys SET pending = pending - (SELECT count(*) FROM d), halted = false, halt_error = NULL
	WHERE key IN (SELECT key FROM k))
SELECT count(*) FROM d`, key).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("seqpg: discard: %w", err)
	}
	return n, nil
}

// KeyState is a key's durable state, from State.
type KeyState struct {
	Pending   int64  // jobs queued or running
	Paused    bool   // Pause was called and Resume not since
	Halted    bool   // a job failed under WithHaltOnError; Resume or Discard lifts it
	HaltError string // the error that halted it
	Leased    bool   // a worker holds the key now
}

// State returns key's state; a key never seen is all zero.
func State(ctx context.Context, db DBTX, key string) (KeyState, error) {
	if err := checkArgs(ctx, key); err != nil {
		return KeyState{}, err
	}
	var s KeyState
	var herr *string
	err := db.QueryRow(ctx, `
SELECT pending, paused, halted, halt_error, lease_until > clock_timestamp()
FROM seqpg_keys WHERE key = $1`, key).Scan(&s.Pending, &s.Paused, &s.Halted, &herr, &s.Leased)
	if errors.Is(err, pgx.ErrNoRows) {
		return KeyState{}, nil
	}
	if err != nil {
		return KeyState{}, fmt.Errorf("seqpg: state: %w", err)
	}
	if herr != nil {
		s.HaltError = *herr
	}
	return s, nil
}

func checkArgs(ctx context.Context, key string) error {
	if ctx == nil {
		return ErrNilContext
	}
	return checkKey(key)
}
