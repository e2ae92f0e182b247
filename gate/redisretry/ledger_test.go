package redisretry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/x402gate/x402gate/gate/payledger"
	"github.com/x402gate/x402gate/gate/payledger/ledgertest"
	"github.com/x402gate/x402gate/gate/redisretry"
	"github.com/x402gate/x402gate/internal/testenv"
)

// ledgers returns the in-process ledger and two Redis ledgers on one server (two
// instances), each under a fresh prefix; the conformance tests run on each pair.
func ledgers(t *testing.T) map[string][2]payledger.Ledger {
	t.Helper()
	url := testenv.StartRedis(t)
	open := func(prefix string) *redisretry.Store {
		s, err := redisretry.Open(t.Context(), url, prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	m := payledger.NewMemory(0, nil)
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	return map[string][2]payledger.Ledger{"memory": {m, m}, "redis": {open(prefix), open(prefix)}}
}

// TestLedgerRedisDown: every transition fails with ErrUnavailable when Redis is gone.
func TestLedgerRedisDown(t *testing.T) {
	srv := testenv.StartRedisServer(t, testenv.RedisConfig{})
	o, _ := redis.ParseURL(srv.URL)
	c := redis.NewClient(o)
	defer c.Close()
	s := redisretry.New(c, "")
	srv.Stop()
	ctx := context.Background()
	if _, err := s.Begin(ctx, payledger.Claim{Key: "k", Fingerprint: []byte("f"), Binding: []byte("b"), Owner: "o", Lease: time.Minute, TTL: time.Hour}); !errors.Is(err, redisretry.ErrUnavailable) {
		t.Errorf("Begin: %v", err)
	}
	if _, err := s.End(ctx, "k", "o", payledger.Answer, nil, 0, 0); !errors.Is(err, redisretry.ErrUnavailable) {
		t.Errorf("End: %v", err)
	}
}

// TestLedgerConformance: memory and Redis behave alike, transition by transition, and 40
// attempts of one payment across two instances take one lease.
func TestLedgerConformance(t *testing.T) { ledgertest.Run(t, ledgers(t)) }
