// Package sqldb opens SQLite and PostgreSQL databases behind database/sql, migrates a
// caller's schema in numbered versions, and keeps the database password out of every error
// text. It knows no table but the one that records applied versions, which the caller names.
package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/x402gate/x402gate/internal/redact"
)

// Dialect is what differs between the two engines. Queries use $1, $2, ... placeholders,
// which both drivers accept.
type Dialect struct {
	// Name is "sqlite" or "postgres".
	Name string
	// BlobType is the binary column type: BLOB or BYTEA.
	BlobType string
	// lock serialises migrations across processes inside tx; nil when BEGIN already does.
	lock func(ctx context.Context, tx *sql.Tx, key int64) error
}

// The dialects of OpenSQLite and OpenPostgres.
var (
	SQLite   = Dialect{Name: "sqlite", BlobType: "BLOB"}
	Postgres = Dialect{Name: "postgres", BlobType: "BYTEA", lock: func(ctx context.Context, tx *sql.Tx, key int64) error {
		_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, key)
		return err
	}}
)

// DB is an open database and its dialect. Its methods are database/sql's.
type DB struct {
	*sql.DB
	Dialect Dialect
	secret  string // the password, scrubbed from every error text
}

// sqliteBusyTimeoutMillis is how long a write waits for another connection's write lock
// before it fails with SQLITE_BUSY.
const sqliteBusyTimeoutMillis = 10_000

// OpenSQLite opens (creating it, mode 0600, and its parent directory, mode 0700, if needed)
// the SQLite database at path and checks it answers. The database runs in WAL mode with synchronous=FULL, so a
// committed row survives a crash; a write waits up to 10 s for the write lock; foreign keys
// are enforced; transactions begin IMMEDIATE. Temporary storage is in memory: a statement
// of a transaction with several (a group commit's batch) keeps the pages it changes in a
// statement journal, to undo that statement alone, which SQLite otherwise spills to a file
// in the temporary directory past 64 KiB (24 writes a verdict submit, more than the
// database and its log together). It holds no durable state: a crash loses it either way.
func OpenSQLite(ctx context.Context, path string) (*DB, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	// A new database is created readable by its owner only; SQLite gives its -wal and
	// -shm files the database file's mode.
	f, err := os.OpenFile(abs, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	f.Close()
	// A file: URI, so a path holding '?' or '#' stays a path.
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqliteBusyTimeoutMillis))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "temp_store(MEMORY)")
	q.Set("_txlock", "immediate")
	dsn := (&url.URL{Scheme: "file", Path: abs}).String() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return ping(ctx, &DB{DB: db, Dialect: SQLite})
}

// OpenPostgres connects to the PostgreSQL database at dsn (a postgres:// URL or key=value
// string, as pgx parses it) and checks it answers. No error carries the DSN or its
// password.
func OpenPostgres(ctx context.Context, dsn string) (*DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx quotes the DSN, redacted only on a best-effort basis: say nothing of it.
		return nil, errors.New("postgres: invalid dsn: want postgres://user[:password]@host:port/db[?sslmode=...]")
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = pgConnectTimeout
	}
	return ping(ctx, &DB{DB: stdlib.OpenDB(*cfg), Dialect: Postgres, secret: cfg.Password})
}

// Pool bounds of every handle Open* returns (docs/reliability.md#resource-limits): at
// most MaxOpenConns connections, of which MaxIdleConns stay open when idle, for at most
// ConnMaxIdleTime. database/sql's own default is no bound on open connections, which a
// burst could turn into as many PostgreSQL backends as requests in flight. Every
// statement of ours holds a connection only for itself (a transaction for its own
// statements), so the bound queues work and cannot deadlock it.
const (
	MaxOpenConns    = 20
	MaxIdleConns    = 10
	ConnMaxIdleTime = 5 * time.Minute
)

// pgConnectTimeout bounds a PostgreSQL connection attempt when the DSN sets no
// connect_timeout.
const pgConnectTimeout = 10 * time.Second

func ping(ctx context.Context, db *DB) (*DB, error) {
	db.SetMaxOpenConns(MaxOpenConns)
	db.SetMaxIdleConns(MaxIdleConns)
	db.SetConnMaxIdleTime(ConnMaxIdleTime)
	err := db.PingContext(ctx)
	// A new SQLite file that several processes or handles open at once: switching it to
	// WAL takes a lock that the busy timeout does not wait for, so the first connection
	// may find it busy. Wait as long as a write would.
	deadline := time.Now().Add(sqliteBusyTimeoutMillis * time.Millisecond)
	for db.Dialect.Name == SQLite.Name && err != nil && isBusy(err) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		err = db.PingContext(ctx)
	}
	if err != nil {
		_ = db.DB.Close()
		return nil, fmt.Errorf("%s open: %w", db.Dialect.Name, db.Err(err))
	}
	return db, nil
}

// isBusy reports SQLite's "database is locked" (SQLITE_BUSY).
func isBusy(err error) bool {
	m := err.Error()
	return strings.Contains(m, "SQLITE_BUSY") || strings.Contains(m, "database is locked")
}

// Err returns err with the database password scrubbed from its text, for wrapping with
// the caller's context. errors.Is still finds context.Canceled and
// context.DeadlineExceeded in it, and nothing else of err: a driver's error can quote the
// DSN. Err(nil) is nil.
func (db *DB) Err(err error) error {
	if err == nil {
		return nil
	}
	e := &scrubbedError{msg: redact.Secrets(err.Error(), db.secret)}
	for _, ctxErr := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, ctxErr) {
			e.ctxErr = ctxErr
		}
	}
	return e
}

// scrubbedError is a driver error reduced to its scrubbed text.
type scrubbedError struct {
	msg    string
	ctxErr error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.ctxErr }
