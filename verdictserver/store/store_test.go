package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/internal/testenv"
)

// storeOpen opens a new handle on one database; several handles stand for several
// instances.
type storeOpen func() (*Store, error)

// storeCase is one behaviour both SQL engines share.
type storeCase struct {
	name string
	run  func(t *testing.T, open storeOpen)
}

// mustOpen opens a handle that is closed when t ends.
func mustOpen(t *testing.T, open storeOpen) *Store {
	t.Helper()
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// mustAgent creates an agent named name.
func mustAgent(t *testing.T, s *Store, name string) Agent {
	t.Helper()
	a, err := s.CreateAgent(context.Background(), name)
	if err != nil {
		t.Fatalf("create agent %s: %v", name, err)
	}
	return a
}

// wantErr fails t unless err is want (nil meaning success).
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

var lifecycleCases = []storeCase{
	{"reopening migrates idempotently and keeps every row (durability)", func(t *testing.T, open storeOpen) {
		ctx := context.Background()
		s := mustOpen(t, open)
		a := mustAgent(t, s, "durable")
		if _, err := s.CreateKey(ctx, a.ID, "k_durable", hashOf("durable-key"), []string{"verdicts:create:own"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddWallet(ctx, a.ID, 84532, addr(1)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetPolicy(ctx, a.ID, []byte(`{"description":"d"}`), "test"); err != nil {
			t.Fatal(err)
		}
		pending := testTransaction(a.ID, 1, epoch)
		done := testTransaction(a.ID, 2, epoch)
		for _, tx := range []*Transaction{pending, done} {
			if err := s.CreateTransaction(ctx, tx); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Complete(ctx, done.RequestHash, StatusApproved, []byte(`{"outcome":"approved"}`), ptr(1)); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			s = mustOpen(t, open)
			if got, err := s.AgentByName(ctx, "durable"); err != nil || got.ID != a.ID {
				t.Fatalf("reopen %d: agent = %+v, %v", i, got, err)
			}
			if k, err := s.KeyByHash(ctx, hashOf("durable-key")); err != nil || k.ID != "k_durable" {
				t.Fatalf("reopen %d: key = %+v, %v", i, k, err)
			}
			if owner, err := s.WalletOwner(ctx, 84532, addr(1)); err != nil || owner != a.ID {
				t.Fatalf("reopen %d: wallet owner = %q, %v", i, owner, err)
			}
			if p, err := s.ActivePolicy(ctx, a.ID); err != nil || p.Version != 1 {
				t.Fatalf("reopen %d: policy = %+v, %v", i, p, err)
			}
			if got, err := s.Pending(ctx, 0); err != nil || len(got) != 1 || got[0].RequestHash != pending.RequestHash {
				t.Fatalf("reopen %d: pending = %+v, %v", i, got, err)
			}
			if got, err := s.TransactionByHash(ctx, done.RequestHash); err != nil || got.Status != StatusApproved {
				t.Fatalf("reopen %d: completed = %+v, %v", i, got, err)
			}
		}
		var n, versions int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT version) FROM `+schema.Table).Scan(&n, &versions); err != nil {
			t.Fatal(err)
		}
		if n != len(schema.Migrations) || versions != n {
			t.Fatalf("%d migration rows (%d versions), want %d", n, versions, len(schema.Migrations))
		}
	}},
	{"concurrent opens of a new database all migrate it", func(t *testing.T, open storeOpen) {
		var wg sync.WaitGroup
		handles := make([]*Store, 4)
		errs := make([]error, 4)
		for i := range handles {
			wg.Add(1)
			go func(i int) { defer wg.Done(); handles[i], errs[i] = open() }(i)
		}
		wg.Wait()
		for i, s := range handles {
			if errs[i] != nil {
				t.Fatalf("open %d: %v", i, errs[i])
			}
			t.Cleanup(func() { _ = s.Close() })
		}
		a := mustAgent(t, handles[0], "everywhere")
		if got, err := handles[3].Agent(context.Background(), a.ID); err != nil || got != a {
			t.Fatalf("agent on another handle = %+v, %v; want %+v", got, err, a)
		}
	}},
	{"a database migrated by a newer build is refused", func(t *testing.T, open storeOpen) {
		s := mustOpen(t, open)
		if _, err := s.db.Exec(`INSERT INTO ` + schema.Table + ` (version, applied_at) VALUES (9999, 0)`); err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		if s, err := open(); err == nil || !strings.Contains(err.Error(), "newer") {
			if s != nil {
				_ = s.Close()
			}
			t.Fatalf("open err = %v, want a newer-schema refusal", err)
		}
	}},
	{"ping answers while the database is open", func(t *testing.T, open storeOpen) {
		s, err := open()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Ping(context.Background()); err != nil {
			t.Fatalf("ping: %v", err)
		}
		_ = s.Close()
		if err := s.Ping(context.Background()); err == nil {
			t.Fatal("ping of a closed store succeeded")
		}
	}},
}

func allCases() []storeCase {
	var all []storeCase
	for _, cs := range [][]storeCase{lifecycleCases, agentCases, keyCases, walletCases, policyCases, transactionCases, listCases, commitCases, keyCacheCases, windowCases, keyUseCases, searchCases} {
		all = append(all, cs...)
	}
	return all
}

func runSuite(t *testing.T, opener func(t *testing.T) storeOpen) {
	for _, tc := range allCases() {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, opener(t)) })
	}
}

func TestSQLiteStore(t *testing.T) {
	runSuite(t, func(t *testing.T) storeOpen {
		path := filepath.Join(t.TempDir(), "nested", "verdict?#.db")
		return func() (*Store, error) {
			db, err := sqldb.OpenSQLite(context.Background(), path)
			if err != nil {
				return nil, err
			}
			return Open(context.Background(), db)
		}
	})
}

func TestPostgresStore(t *testing.T) {
	srv := testenv.StartPostgresServer(t, testenv.PostgresConfig{})
	n := 0
	runSuite(t, func(t *testing.T) storeOpen {
		n++
		dsn := srv.CreateDatabase(t, fmt.Sprintf("verdict_case_%d", n))
		return func() (*Store, error) {
			db, err := sqldb.OpenPostgres(context.Background(), dsn)
			if err != nil {
				return nil, err
			}
			return Open(context.Background(), db)
		}
	})
}

// TestPostgresStoreKeepsSecretsOutOfErrors: with the database gone, every kind of call
// fails, and no error carries the database password or a key hash.
func TestPostgresStoreKeepsSecretsOutOfErrors(t *testing.T) {
	const password = "pg-s3cret-9d02f1"
	ctx := context.Background()
	srv := testenv.StartPostgresServer(t, testenv.PostgresConfig{Password: password})
	db, err := sqldb.OpenPostgres(ctx, srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := mustAgent(t, s, "secretive")
	hash := hashOf("a-secret-key")
	srv.Stop()
	calls := map[string]func() error{
		"create agent": func() error { _, err := s.CreateAgent(ctx, "other"); return err },
		"create key": func() error {
			_, err := s.CreateKey(ctx, a.ID, "k_x", hash, []string{"verdicts:read:own"})
			return err
		},
		"key by hash":        func() error { _, err := s.KeyByHash(ctx, hash); return err },
		"set policy":         func() error { _, err := s.SetPolicy(ctx, a.ID, []byte(`{}`), "test"); return err },
		"create transaction": func() error { return s.CreateTransaction(ctx, testTransaction(a.ID, 1, epoch)) },
		"complete":           func() error { return s.Complete(ctx, "h", StatusApproved, []byte(`{}`), nil) },
		"pending":            func() error { _, err := s.Pending(ctx, 0); return err },
	}
	for name, call := range calls {
		t.Run(name+" fails without the password or the hash", func(t *testing.T) {
			err := call()
			if err == nil {
				t.Fatal("succeeded with the database down")
			}
			for _, secret := range []string{password, fmt.Sprintf("%x", hash), string(hash[:])} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error text carries a secret: %q", err)
				}
			}
			if errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) {
				t.Fatalf("a database failure reads as %v", err)
			}
		})
	}
}

// TestPolicyVersionsHaveNoUpdatePath: policy versions are immutable because no statement
// of the store changes or removes one.
func TestPolicyVersionsHaveNoUpdatePath(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sources: %v", err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := strings.Join(strings.Fields(strings.ToUpper(string(b))), " ")
		for _, stmt := range []string{"UPDATE POLICY_VERSIONS", "DELETE FROM POLICY_VERSIONS", "DO UPDATE"} {
			if strings.Contains(src, stmt) {
				t.Errorf("%s changes policy versions: %q", f, stmt)
			}
		}
	}
}
