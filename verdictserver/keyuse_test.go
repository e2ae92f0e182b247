package verdictserver

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// instance is one verdict service of several on one database, with its own clock.
type instance struct {
	*env
	clock *testenv.Clock
}

func newInstance(t *testing.T, st *store.Store, at time.Time) instance {
	c := testenv.NewClock(at)
	return instance{env: newEnv(t, st, func(_ *Config, d *Deps) { d.Now = c.Now }), clock: c}
}

// at moves the instance's clock to t.
func (in instance) at(t time.Time) { in.clock.Add(t.Sub(in.clock.Now())) }

// use authenticates key on the instance at the time at, and waits for the write it may
// have started after its answer.
func (in instance) use(t *testing.T, key string, at time.Time) {
	t.Helper()
	in.at(at)
	if r := in.status(key, "0xunknown"); r.status != http.StatusNotFound {
		t.Fatalf("an authenticated read = %d %s", r.status, r.raw)
	}
	in.srv.uses.wg.Wait()
}

// lastUsed is the key's last use as the store holds it; zero for none.
func lastUsed(t *testing.T, st *store.Store, keyID string) time.Time {
	t.Helper()
	k, err := st.Key(context.Background(), keyID)
	if err != nil {
		t.Fatal(err)
	}
	if k.LastUsedAt == nil {
		return time.Time{}
	}
	return *k.LastUsedAt
}

// TestKeyLastUseIsStored: a key's last use is written to the store, where every instance
// and a restart read it, at most once per key per KeyUseInterval per instance; on SQLite
// and on PostgreSQL.
func TestKeyLastUseIsStored(t *testing.T) {
	for _, engine := range []struct {
		name string
		open func(t *testing.T) func() *store.Store
	}{
		{"sqlite", func(t *testing.T) func() *store.Store {
			path := filepath.Join(t.TempDir(), "verdict.db")
			return func() *store.Store { return sqliteAt(path)(t) }
		}},
		{"postgres", func(t *testing.T) func() *store.Store {
			dsn := postgresDSN(t)
			return func() *store.Store { return postgresAt(t, dsn) }
		}},
	} {
		t.Run(engine.name, func(t *testing.T) {
			open := engine.open(t)
			t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
			a, b := newInstance(t, open(), t0), newInstance(t, open(), t0)
			ag := a.agent("used", common.HexToAddress("0xA11CE00000000000000000000000000000000031"), "")
			keyID := keyIDOf(t, a.env, ag.ID)
			if got := lastUsed(t, b.st, keyID); !got.IsZero() {
				t.Fatalf("a new key was used at %s", got)
			}
			a.use(t, ag.Key, t0)
			if got := lastUsed(t, b.st, keyID); !got.Equal(t0) {
				t.Fatalf("another instance reads the last use %s, want %s", got, t0)
			}
			a.use(t, ag.Key, t0.Add(KeyUseInterval/2))
			if got := lastUsed(t, b.st, keyID); !got.Equal(t0) {
				t.Fatalf("a second use within %s was written (%s): a write per request", KeyUseInterval, got)
			}
			b.use(t, ag.Key, t0.Add(KeyUseInterval/2))
			if got := lastUsed(t, a.st, keyID); !got.Equal(t0.Add(KeyUseInterval / 2)) {
				t.Fatalf("the other instance's first use is not written: %s", got)
			}
			later := t0.Add(KeyUseInterval + time.Second)
			a.use(t, ag.Key, later)
			_ = a.srv.Close()
			_ = a.st.Close()
			if got := lastUsed(t, open(), keyID); !got.Equal(later) {
				t.Fatalf("after a restart the last use is %s, want %s", got, later)
			}
		})
	}
}

// TestKeyUseIsWrittenAfterTheAnswer: with the database's write lock held by another
// process, an authenticated request is answered, and the key's use is written once the
// lock is released.
func TestKeyUseIsWrittenAfterTheAnswer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdict.db")
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	in := newInstance(t, sqliteAt(path)(t), t0)
	ag := in.agent("used", common.HexToAddress("0xA11CE00000000000000000000000000000000032"), "")
	keyID := keyIDOf(t, in.env, ag.ID)

	other, err := sqldb.OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lock, err := other.BeginTx(context.Background(), nil) // BEGIN IMMEDIATE: the write lock
	if err != nil {
		t.Fatal(err)
	}
	in.at(t0)
	if r := in.status(ag.Key, "0xunknown"); r.status != http.StatusNotFound {
		t.Fatalf("an authenticated read while the store is locked = %d %s", r.status, r.raw)
	}
	if got := lastUsed(t, in.st, keyID); !got.IsZero() {
		t.Fatalf("the use was written (%s) while another process held the write lock", got)
	}
	_ = lock.Rollback()
	in.srv.uses.wg.Wait()
	if got := lastUsed(t, in.st, keyID); !got.Equal(t0) {
		t.Fatalf("once the lock is released the last use is %v, want %s", got, t0)
	}
}

// keyIDOf is the id of the agent's one key.
func keyIDOf(t *testing.T, e *env, agentID string) string {
	t.Helper()
	keys, err := e.srv.Operator().Keys(context.Background(), agentID)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys of %s: %v, %v", agentID, keys, err)
	}
	return keys[0].ID
}
