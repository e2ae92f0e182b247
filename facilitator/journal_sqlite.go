package facilitator

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// sqliteBusyTimeoutMillis is how long a write waits for another connection's write lock
// before it fails with SQLITE_BUSY.
const sqliteBusyTimeoutMillis = 10_000

// OpenSQLiteJournal opens (creating it and its parent directory if needed) the SQLite
// settlement journal at path, the embedded default of a single instance, and migrates its
// schema. The database runs in WAL mode with synchronous=FULL, so a row Prepare has
// written survives a crash before the broadcast it guards; a write waits up to 10 s for
// the write lock; transactions begin IMMEDIATE.
func OpenSQLiteJournal(ctx context.Context, path string) (*SQLJournal, error) {
	if path == "" {
		return nil, errors.New("sqlite journal: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite journal: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite journal: %w", err)
	}
	// A file: URI, so a path holding '?' or '#' stays a path.
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqliteBusyTimeoutMillis))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	dsn := (&url.URL{Scheme: "file", Path: abs}).String() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite journal: %w", err)
	}
	return newSQLJournal(ctx, db, sqlDialect{name: "sqlite", blobType: "BLOB"}, "")
}
