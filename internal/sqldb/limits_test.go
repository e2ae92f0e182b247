package sqldb

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestPoolIsBounded: a handle opens at most MaxOpenConns connections however many callers
// hold one at once; the rest wait for a connection (docs/reliability.md#resource-limits).
func TestPoolIsBounded(t *testing.T) {
	ctx := context.Background()
	db, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "pool.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := db.Stats().MaxOpenConnections; got != MaxOpenConns {
		t.Fatalf("MaxOpenConnections %d, want %d", got, MaxOpenConns)
	}
	// Twice the bound of callers each hold a connection until all have asked.
	release := make(chan struct{})
	var held, done sync.WaitGroup
	held.Add(MaxOpenConns)
	for i := 0; i < 2*MaxOpenConns; i++ {
		done.Add(1)
		go func(i int) {
			defer done.Done()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			c, err := db.Conn(cctx)
			if err != nil {
				t.Errorf("conn %d: %v", i, err)
				return
			}
			if i < MaxOpenConns {
				held.Done()
				<-release
			}
			c.Close()
		}(i)
	}
	held.Wait()
	if got := db.Stats().OpenConnections; got > MaxOpenConns {
		t.Errorf("%d connections open, want at most %d", got, MaxOpenConns)
	}
	close(release)
	done.Wait()
	if got := db.Stats().OpenConnections; got > MaxOpenConns {
		t.Errorf("%d connections open, want at most %d", got, MaxOpenConns)
	}
}
