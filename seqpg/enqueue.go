package seqpg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the per-key controls need of a database: *pgxpool.Pool,
// *pgx.Conn and pgx.Tx all have it.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// notifyChannel is the LISTEN/NOTIFY channel an enqueue to an idle key
// wakes workers on.
const notifyChannel = "seqpg"

// A JobOption configures one Enqueue. Options print as the call that made
// them.
type JobOption interface {
	apply(*jobSpec)
	String() string
}

type jobSpec struct {
	high bool
	kind string
	tag  string
}

type (
	highOption    struct{}
	kindOption    string
	replaceOption string
)

// High puts the job in its key's High lane: it runs before the key's
// Normal jobs not yet started (in commit order among High jobs), as
// seqsched's High does. A running job is never interrupted.
func High() JobOption { return highOption{} }

// Kind labels the job for its handler (Job.Kind), as River's job kinds
// do; seqpg does not interpret it.
func Kind(kind string) JobOption { return kindOption(kind) }

// Replace tags the job: if the key has a job of the same lane and tag
// that has not started (no attempt of it has begun and failed, and none is
// running), this job takes its place (its Seq, its position) with this
// job's kind and payload, and no new job is added; else it is added as
// usual. Latest wins, as seqsched's Replace: for presence, a price, a
// setting, where only the newest value matters.
func Replace(tag string) JobOption { return replaceOption(tag) }

func (highOption) apply(s *jobSpec)      { s.high = true }
func (o kindOption) apply(s *jobSpec)    { s.kind = string(o) }
func (o replaceOption) apply(s *jobSpec) { s.tag = string(o) }
func (highOption) String() string        { return "High()" }
func (o kindOption) String() string      { return fmt.Sprintf("Kind(%q)", string(o)) }
func (o replaceOption) String() string   { return fmt.Sprintf("Replace(%q)", string(o)) }

// Enqueued is what Enqueue did.
type Enqueued struct {
	ID       int64 // the job's ID (for a replacement, the replaced job's)
	Seq      int64 // its place in its key
	Replaced bool  // Replace found a job to take the place of
}

// Enqueue adds a job to key in tx, the caller's transaction, as River's
// InsertTx does: the job exists if and only if tx commits, together with
// whatever else tx wrote.
//
// Order per key is commit order: Enqueue takes key's next sequence number
// under a lock on key's row that tx holds until it ends, so a second
// enqueue of the same key waits for tx's commit or rollback. A job whose
// transaction commits first always runs first, whichever Enqueue call
// began first; River's free edition orders by ID, taken from a sequence
// before the commit, so there a later ID can commit and run first. The
// cost is that enqueuing transactions of one key run one at a time past
// their Enqueue: keep them short (different keys do not wait for each
// other). Jobs of one key run one at a time across all workers, High
// before Normal.
//
// When tx commits and key had no worker, the workers listening are
// notified (NOTIFY), and one of them starts the job within a round trip.
//
// A key is 1 to MaxKeyBytes bytes of UTF-8 without NUL. Errors: ErrNilTx,
// ErrNilContext, or an ErrInvalidKey error, all returned before a
// statement is sent, so tx stays usable; or the database's error (tx is
// then aborted, as after any failed statement).
func Enqueue(ctx context.Context, tx pgx.Tx, key string, payload []byte, opts ...JobOption) (Enqueued, error) {
	if ctx == nil {
		return Enqueued{}, ErrNilContext
	}
	if tx == nil {
		return Enqueued{}, ErrNilTx
	}
	if err := checkKey(key); err != nil {
		return Enqueued{}, err
	}
	var spec jobSpec
	for _, o := range opts {
		if o != nil {
			o.apply(&spec)
		}
	}
	lane := laneNormal
	if spec.high {
		lane = laneHigh
	}
	var tag *string
	if spec.tag != "" {
		tag = &spec.tag
	}
	var e Enqueued
	if tag != nil {
		// Lock the key first, as every enqueue does, so that replacing and
		// adding are one step in key's commit order.
		if _, err := tx.Exec(ctx, sqlLockKey, key); err != nil {
			return Enqueued{}, fmt.Errorf("seqpg: enqueue: %w", err)
		}
		err := tx.QueryRow(ctx, sqlReplace, key, lane, spec.tag, spec.kind, payload).Scan(&e.ID, &e.Seq)
		switch {
		case err == nil:
			e.Replaced = true
			return e, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return Enqueued{}, fmt.Errorf("seqpg: enqueue: %w", err)
		}
	}
	b := &pgx.Batch{}
	b.Queue(sqlEnqueue, key, lane, spec.kind, payload, tag).QueryRow(func(r pgx.Row) error { return r.Scan(&e.ID, &e.Seq) })
	b.Queue(sqlNotifyIdle, key, notifyChannel)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return Enqueued{}, fmt.Errorf("seqpg: enqueue: %w", err)
	}
	return e, nil
}

const (
	laneHigh   = 0
	laneNormal = 1
)

const (
	// sqlEnqueue takes the key's next sequence number under its row lock
	// (an upsert locks the row until the transaction ends) and adds the
	// job.
	sqlEnqueue = `
WITH k AS (
	INSERT INTO seqpg_keys AS k (key, last_seq, pending) VALUES ($1, 1, 1)
	ON CONFLICT (key) DO UPDATE SET last_seq = k.last_seq + 1, pending = k.pending + 1
	RETURNING last_seq)
INSERT INTO seqpg_jobs (key, lane, seq, kind, payload, tag)
SELECT $1, $2, k.last_seq, $3, $4, $5 FROM k
RETURNING id, seq`

	// sqlNotifyIdle wakes the listening workers when no worker holds the
	// key: one that does takes the key's next job itself. PostgreSQL
	// delivers the notification at commit, and folds identical ones of
	// one transaction into one.
	sqlNotifyIdle = `SELECT pg_notify($2, '') FROM seqpg_keys WHERE key = $1 AND lease_until < clock_timestamp()`

	sqlLockKey = `
INSERT INTO seqpg_keys (key) VALUES ($1)
ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key`

	// sqlReplace rewrites the key's oldest job of the lane and tag that
	// has not started; a running one is locked by its worker and skipped.
	sqlReplace = `
UPDATE seqpg_jobs SET kind = $4, payload = $5, enqueued_at = now()
WHERE id = (
	SELECT id FROM seqpg_jobs
	WHERE key = $1 AND lane = $2 AND tag = $3 AND started_at IS NULL
	ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, seq`
)
