package journal

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/x402gate/x402gate/gate/payledger/ledgertest"
	"github.com/x402gate/x402gate/internal/testenv"
)

// ledgers opens the payment ledger twice on one SQLite file and twice on one PostgreSQL
// database: two handles of one ledger, as a restart (SQLite) or two instances
// (PostgreSQL) hold it.
func ledgers(t *testing.T) map[string][2]*Ledger {
	t.Helper()
	ctx := context.Background()
	open := func(j *DB, err error) *Ledger {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = j.Close() })
		l, err := j.Ledger(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	path := filepath.Join(t.TempDir(), "journal.db")
	dsn := testenv.StartPostgres(t)
	return map[string][2]*Ledger{
		"sqlite":   {open(OpenSQLite(ctx, path)), open(OpenSQLite(ctx, path))},
		"postgres": {open(OpenPostgres(ctx, dsn)), open(OpenPostgres(ctx, dsn))},
	}
}

// TestLedgerConformance: the ledger kept with the journal answers as the in-process and
// the Redis ones do, transition by transition, on SQLite and on PostgreSQL; 40 attempts
// of one payment across two handles take one lease.
func TestLedgerConformance(t *testing.T) { ledgertest.Run(t, ledgers(t)) }
