package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

var testSchema = Schema{
	Table:   "test_schema_migrations",
	LockKey: 1,
	Migrations: []Migration{
		{Version: 1, Statements: []string{`CREATE TABLE things (id BIGINT PRIMARY KEY, data {{blob}} NOT NULL)`}},
		{Version: 2, Statements: []string{`ALTER TABLE things ADD COLUMN name TEXT NOT NULL DEFAULT ''`}},
	},
}

func TestMigrate(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "nested", "db?#.sqlite")
	open := func(t *testing.T) *DB {
		t.Helper()
		db, err := OpenSQLite(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	t.Run("every version is applied once, however often the schema is migrated", func(t *testing.T) {
		db := open(t)
		for i := 0; i < 3; i++ {
			if err := db.Migrate(ctx, testSchema); err != nil {
				t.Fatalf("migrate %d: %v", i, err)
			}
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO things (id, data, name) VALUES ($1, $2, $3)`, 1, []byte{1}, "a"); err != nil {
			t.Fatalf("insert into the migrated table: %v", err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+testSchema.Table).Scan(&n); err != nil || n != 2 {
			t.Fatalf("%d version rows, %v; want 2", n, err)
		}
	})
	t.Run("a database migrated by a newer build is refused", func(t *testing.T) {
		old := testSchema
		old.Migrations = old.Migrations[:1]
		err := open(t).Migrate(ctx, old)
		if err == nil || !strings.Contains(err.Error(), "newer than this build") {
			t.Fatalf("err = %v, want a newer-schema refusal", err)
		}
	})
	t.Run("a failing statement applies nothing of its version", func(t *testing.T) {
		bad := testSchema
		bad.Migrations = append(append([]Migration{}, bad.Migrations...),
			Migration{Version: 3, Statements: []string{`CREATE TABLE more (id BIGINT)`, `NOT SQL`}})
		db := open(t)
		if err := db.Migrate(ctx, bad); err == nil {
			t.Fatal("migrated a broken statement")
		}
		if _, err := db.ExecContext(ctx, `SELECT * FROM more`); err == nil {
			t.Fatal("the broken version's first statement was kept")
		}
	})
}

func TestErrKeepsThePasswordOut(t *testing.T) {
	db := &DB{Dialect: Postgres, secret: "pw-77c1"}
	cases := []struct {
		name   string
		err    error
		wantIs error
	}{
		{"a driver error quoting the password", errors.New("auth failed for pw-77c1"), nil},
		{"a cancelled context", fmt.Errorf("query pw-77c1: %w", context.Canceled), context.Canceled},
		{"a deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), context.DeadlineExceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := db.Err(tc.err)
			if strings.Contains(got.Error(), "pw-77c1") {
				t.Fatalf("Err = %q, carries the password", got)
			}
			if tc.wantIs != nil && !errors.Is(got, tc.wantIs) {
				t.Fatalf("errors.Is(%v, %v) = false", got, tc.wantIs)
			}
			if errors.Is(got, tc.err) {
				t.Fatalf("Err still wraps the driver error, whose text may carry the DSN")
			}
		})
	}
	if db.Err(nil) != nil {
		t.Fatal("Err(nil) != nil")
	}
}

func TestOpenPostgresRefusesAMalformedDSNQuietly(t *testing.T) {
	_, err := OpenPostgres(context.Background(), "host=127.0.0.1 password=pw-31aa port=bad")
	if err == nil || strings.Contains(err.Error(), "pw-31aa") {
		t.Fatalf("err = %v, want a refusal without the password", err)
	}
}

// TestSQLiteFilesAreTheOwners: a new database, its write-ahead log and its shared-memory
// file are readable by their owner only, whatever the umask.
func TestSQLiteFilesAreTheOwners(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state", "verdict.db")
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	db, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx, testSchema); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm", filepath.Dir(path)} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %o, want no group or other bits", filepath.Base(p), perm)
		}
	}
}

// TestSQLiteConnectionsKeepTemporaryStorageInMemory: every connection of the pool, not only
// the first, runs durable (synchronous=FULL) with its statement journals in memory
// (temp_store=MEMORY), so a batch of writes makes no writes to a temporary file.
func TestSQLiteConnectionsKeepTemporaryStorageInMemory(t *testing.T) {
	ctx := context.Background()
	db, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "verdict.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var conns []*sql.Conn
	for range 3 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		var temp, sync int
		if err := c.QueryRowContext(ctx, `PRAGMA temp_store`).Scan(&temp); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
			t.Fatal(err)
		}
		if temp != 2 || sync != 2 {
			t.Errorf("connection %d: temp_store = %d, synchronous = %d; want 2 (MEMORY) and 2 (FULL)", i, temp, sync)
		}
		c.Close()
	}
}
