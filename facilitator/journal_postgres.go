package facilitator

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// journalMigrationLockKey is the pg_advisory_xact_lock key that serialises journal
// migrations of one database across instances ("x402gfac" in ASCII).
const journalMigrationLockKey int64 = 0x7834303267666163

// OpenPostgresJournal connects to the PostgreSQL database at dsn (a postgres:// URL or
// key=value string, as pgx parses it), the journal shared by several instances, and
// migrates its schema. Concurrent Opens of one database are safe: migrations run in one
// transaction under an advisory lock. No error carries the DSN or its password.
func OpenPostgresJournal(ctx context.Context, dsn string) (*SQLJournal, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx quotes the DSN, redacted only on a best-effort basis: say nothing of it.
		return nil, errors.New("postgres journal: invalid dsn: want postgres://user[:password]@host:port/db[?sslmode=...]")
	}
	db := stdlib.OpenDB(*cfg)
	return newSQLJournal(ctx, db, sqlDialect{
		name:     "postgres",
		blobType: "BYTEA",
		lock: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, journalMigrationLockKey)
			return err
		},
	}, cfg.Password)
}
