package store

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/internal/testenv"
)

// benchStore opens a store on engine ("sqlite" or "postgres") for b.
func benchStore(b *testing.B, engine string) *Store {
	ctx := context.Background()
	var (
		db  *sqldb.DB
		err error
	)
	if engine == "sqlite" {
		db, err = sqldb.OpenSQLite(ctx, filepath.Join(b.TempDir(), "verdict.db"))
	} else {
		db, err = sqldb.OpenPostgres(ctx, testenv.StartPostgres(b))
	}
	if err != nil {
		b.Fatal(err)
	}
	s, err := Open(ctx, db)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkTransactionLifecycle: one submit (CreateTransaction, durable) and its verdict
// (Complete), the store's share of every POST /transactions.
func BenchmarkTransactionLifecycle(b *testing.B) {
	for _, engine := range []string{"sqlite", "postgres"} {
		b.Run(engine, func(b *testing.B) {
			s := benchStore(b, engine)
			ctx := context.Background()
			a, err := s.CreateAgent(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				tx := testTransaction(a.ID, i, epoch)
				if err := s.CreateTransaction(ctx, tx); err != nil {
					b.Fatal(err)
				}
				if err := s.Complete(ctx, tx.RequestHash, StatusApproved, json.RawMessage(approvedVerdict), ptr(1)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkKeyByHash: the lookup behind every authenticated request.
func BenchmarkKeyByHash(b *testing.B) {
	for _, engine := range []string{"sqlite", "postgres"} {
		b.Run(engine, func(b *testing.B) {
			s := benchStore(b, engine)
			ctx := context.Background()
			a, err := s.CreateAgent(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < 100; i++ {
				if _, err := s.CreateKey(ctx, a.ID, fmt.Sprintf("k_%d", i), hashOf(fmt.Sprint(i)), []string{"verdicts:read:own"}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := s.KeyByHash(ctx, hashOf(fmt.Sprint(i%100))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerdictByHash: the read behind every approval-status request, over 1024
// completed records.
func BenchmarkVerdictByHash(b *testing.B) {
	for _, engine := range []string{"sqlite", "postgres"} {
		b.Run(engine, func(b *testing.B) {
			s := benchStore(b, engine)
			ctx := context.Background()
			a, err := s.CreateAgent(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			const records = 1024
			hashes := make([]string, records)
			for i := range records {
				tx := testTransaction(a.ID, i, epoch)
				if err := s.CreateTransaction(ctx, tx); err != nil {
					b.Fatal(err)
				}
				if err := s.Complete(ctx, tx.RequestHash, StatusApproved, json.RawMessage(approvedVerdict), ptr(1)); err != nil {
					b.Fatal(err)
				}
				hashes[i] = tx.RequestHash
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := s.VerdictByHash(ctx, hashes[i%records]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
