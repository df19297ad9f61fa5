package seqpg

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Beginner is what Migrate needs of a database: *pgxpool.Pool and
// *pgx.Conn have it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// migrationLock is the advisory lock key that serialises Migrate calls of
// concurrent processes.
const migrationLock = 0x736571706700 // "seqpg\0"

// SchemaVersion is the schema version this package's code needs: Migrate
// brings a database up to it.
var SchemaVersion = len(migrationFiles())

func migrationFiles() []string {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		panic("seqpg: " + err.Error())
	}
	slices.Sort(names)
	return names
}

// Migrate creates or upgrades seqpg's tables (seqpg_keys, seqpg_jobs,
// seqpg_dead, seqpg_migrations) in db's current schema, applying the
// embedded migrations not applied yet in one transaction, as River's
// rivermigrate applies its own. It is safe to call from many processes at
// once (an advisory lock serialises them) and at every start; a database
// already at SchemaVersion is left unchanged. It returns an error wrapping
// ErrSchemaNewer when the database was migrated by a newer seqpg.
func Migrate(ctx context.Context, db Beginner) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("seqpg: migrate: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		return fmt.Errorf("seqpg: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS seqpg_migrations (
		version integer PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("seqpg: migrate: %w", err)
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM seqpg_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("seqpg: migrate: %w", err)
	}
	if have > SchemaVersion {
		return fmt.Errorf("seqpg: migrate: database at version %d, this code knows %d: %w", have, SchemaVersion, ErrSchemaNewer)
	}
	for _, name := range migrationFiles() {
		v, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(name, "migrations/"), "_", 2)[0])
		if err != nil {
			panic("seqpg: migration file without a version: " + name)
		}
		if v <= have {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			panic("seqpg: " + err.Error())
		}
		if _, err := tx.Exec(ctx, string(body)); err != nil {
			return fmt.Errorf("seqpg: migrate to version %d: %w", v, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO seqpg_migrations (version) VALUES ($1)`, v); err != nil {
			return fmt.Errorf("seqpg: migrate to version %d: %w", v, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("seqpg: migrate: %w", err)
	}
	return nil
}
