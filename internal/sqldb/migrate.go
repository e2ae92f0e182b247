package sqldb

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Schema is a caller's tables, built up in numbered versions.
type Schema struct {
	// Table records the applied versions. Name it for the component that owns the schema,
	// so two components that migrate one PostgreSQL database cannot collide.
	Table string
	// LockKey is the pg_advisory_xact_lock key that serialises this schema's migrations
	// across processes; again one per component. SQLite needs none.
	LockKey int64
	// Migrations are the versions, ascending from 1. In a statement, {{blob}} is the
	// dialect's binary column type.
	Migrations []Migration
}

// Migration is one version of a Schema: statements applied together.
type Migration struct {
	Version    int64
	Statements []string
}

// Migrate applies the versions of s that the database lacks, in one transaction under the
// dialect's lock, so concurrent Migrates of one database apply each version once. It
// refuses a database migrated by a newer build (a version beyond the last of s).
func (db *DB) Migrate(ctx context.Context, s Schema) error {
	if len(s.Migrations) == 0 || s.Table == "" {
		return fmt.Errorf("%s migrate: empty schema", db.Dialect.Name)
	}
	fail := func(op string, err error) error {
		return fmt.Errorf("%s %s: %w", db.Dialect.Name, op, db.Err(err))
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fail("migrate", err)
	}
	defer func() { _ = tx.Rollback() }()
	if db.Dialect.lock != nil {
		if err := db.Dialect.lock(ctx, tx, s.LockKey); err != nil {
			return fail("migrate lock", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+s.Table+` (
		version    BIGINT PRIMARY KEY,
		applied_at BIGINT NOT NULL
	)`); err != nil {
		return fail("migrate", err)
	}
	var current int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+s.Table).Scan(&current); err != nil {
		return fail("migrate", err)
	}
	latest := s.Migrations[len(s.Migrations)-1].Version
	if current > latest {
		return fmt.Errorf("%s migrate: schema version %d is newer than this build's %d", db.Dialect.Name, current, latest)
	}
	for _, m := range s.Migrations {
		if m.Version <= current {
			continue
		}
		for _, stmt := range m.Statements {
			if _, err := tx.ExecContext(ctx, strings.ReplaceAll(stmt, "{{blob}}", db.Dialect.BlobType)); err != nil {
				return fail(fmt.Sprintf("migrate to version %d", m.Version), err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+s.Table+` (version, applied_at) VALUES ($1, $2)`,
			m.Version, time.Now().UnixMicro()); err != nil {
			return fail("migrate", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fail("migrate", err)
	}
	return nil
}
