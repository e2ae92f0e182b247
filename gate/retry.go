package gate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/x402"
)

// The payment is settled before the upstream runs (DESIGN.md "A paid request"). When the
// upstream then fails (a status >= 500, a connection failure, a panic), the payer has paid
// for nothing. The gate grants the payment retry credits: the same payment header,
// presented again within the grace window, reaches the upstream without a second charge,
// at most RetryConfig.Max times. The facilitator proves the header is the settled one
// (its signature checks out and its nonce is used on chain); the credits are kept in a
// RetryStore, shared through Redis by several instances.

// maxRetryTTL bounds a grant when the authorization's validBefore is far away.
const maxRetryTTL = 24 * time.Hour

// ErrRetryStoreUnavailable is wrapped by every failure to reach a RetryStore. The gate
// fails closed on it: no credit is used, nothing is proxied.
var ErrRetryStoreUnavailable = errors.New("retry store unavailable")

// RetryStore keeps the retry credits of paid requests whose upstream failed. Grant and
// Use are atomic across every process that shares the store.
type RetryStore interface {
	// Grant gives key n credits for ttl and keeps data for Use to return. When key holds
	// a grant already, Grant changes nothing: a retry that fails again earns no credits.
	Grant(ctx context.Context, key string, n int, ttl time.Duration, data []byte) error
	// Use atomically takes one credit of key and returns its data. ok is false when key
	// has none left: never granted, expired, used up or revoked.
	Use(ctx context.Context, key string) (data []byte, ok bool, err error)
	// Revoke removes the credits of key.
	Revoke(ctx context.Context, key string) error
}

// retryKey identifies one payment of one resource: the exact payer, payee, amount, asset,
// network and nonce (facilitator.PaymentKey) and the resource URL, hashed so a long URL
// makes no long key.
func retryKey(req *x402.Requirements, p *x402.Payment) string {
	k := facilitator.PaymentKey{
		Network: req.Network, Asset: req.Asset, Payer: p.Authorization.From,
		PayTo: req.PayTo, Amount: req.Amount, Nonce: p.Authorization.Nonce,
	}
	sum := sha256.Sum256([]byte(k.String() + "\n" + req.Resource.URL))
	return "retry:" + hex.EncodeToString(sum[:])
}

// armRetry prepares the grant of a first settled attempt; ReportUpstream applies it.
func (g *Gate) armRetry(res *Result, req *x402.Requirements, p *x402.Payment) {
	if g.rt.retryMax <= 0 || g.retries == nil {
		return
	}
	ttl := g.remaining(p)
	if g.rt.grace > 0 && g.rt.grace < ttl {
		ttl = g.rt.grace
	}
	if ttl > maxRetryTTL {
		ttl = maxRetryTTL
	}
	if ttl < time.Millisecond {
		return
	}
	data, err := json.Marshal(res.Settlement)
	if err != nil {
		return
	}
	res.retryKey, res.retryTTL, res.retryData = retryKey(req, p), int64(ttl/time.Millisecond), data
}

// useRetry takes a retry credit for a payment the facilitator refused as already settled.
// It returns nil when there is none, so the refusal stands.
func (g *Gate) useRetry(ctx context.Context, req *x402.Requirements, p *x402.Payment) *Result {
	if g.rt.retryMax <= 0 || g.retries == nil {
		return nil
	}
	key := retryKey(req, p)
	data, ok, err := g.retries.Use(ctx, key)
	if err != nil {
		g.log.Error("x402 retry store unavailable", zap.Error(err))
		return g.errorResult(req, p.Version, http.StatusServiceUnavailable, ReasonRetryStoreUnavailable, "the retry store is unavailable")
	}
	if !ok {
		return nil
	}
	var s Settlement
	if err := json.Unmarshal(data, &s); err != nil || !s.Success || !sameAddress(s.Payer, p.Authorization.From) {
		g.log.Error("x402 retry credit holds no settlement")
		return g.errorResult(req, p.Version, http.StatusServiceUnavailable, ReasonRetryStoreUnavailable, "the retry store is unavailable")
	}
	s.Version = p.Version
	g.rebuildResponseHeader(&s)
	res := g.settled(req, p, &s, nil)
	res.Retry, res.retryKey = true, key
	g.log.Info("x402 paid request retried without charge", zap.String("payer", s.Payer), zap.String("tx", s.Transaction))
	return res
}

// ReportUpstream tells the gate how the upstream answered a settled request, for callers
// of Handle (Serve calls it itself). failed is true for a status >= 500, a connection
// failure or a panic. After a first attempt that failed, the payment earns its retry
// credits; after a retry that succeeded, its remaining credits are revoked, so a payment
// buys one good answer. Call it before the failed answer reaches the client, so a quick
// retry finds its credit. It does nothing for other results.
func (g *Gate) ReportUpstream(ctx context.Context, res *Result, failed bool) error {
	if res == nil || res.Kind != KindSettled || res.retryKey == "" || g.retries == nil {
		return nil
	}
	var err error
	switch {
	case res.Retry && !failed:
		err = g.retries.Revoke(ctx, res.retryKey)
	case !res.Retry && failed:
		err = g.retries.Grant(ctx, res.retryKey, g.rt.retryMax, time.Duration(res.retryTTL)*time.Millisecond, res.retryData)
		if err == nil {
			g.log.Info("x402 upstream failed after settlement; retry granted", zap.String("payer", res.Payer), zap.Int("retries", g.rt.retryMax))
		}
	}
	if err != nil {
		g.log.Error("x402 retry store unavailable", zap.Error(err))
		return fmt.Errorf("gate: report upstream: %w", err)
	}
	return nil
}

// DefaultMemoryRetryEntries bounds a MemoryRetryStore made with NewMemoryRetryStore(0).
const DefaultMemoryRetryEntries = 100_000

// MemoryRetryStore is the in-process RetryStore of one instance. It is safe for
// concurrent use.
type MemoryRetryStore struct {
	mu  sync.Mutex
	m   map[string]*credit
	max int
	now func() time.Time
}

type credit struct {
	n    int
	data []byte
	exp  time.Time
}

// NewMemoryRetryStore returns an empty store holding at most maxEntries grants (0 means
// DefaultMemoryRetryEntries). When it is full of unexpired grants, Grant fails with
// ErrRetryStoreUnavailable rather than evict a paid-for credit silently.
func NewMemoryRetryStore(maxEntries int) *MemoryRetryStore {
	if maxEntries <= 0 {
		maxEntries = DefaultMemoryRetryEntries
	}
	return &MemoryRetryStore{m: map[string]*credit{}, max: maxEntries, now: time.Now}
}

// Grant implements RetryStore.
func (s *MemoryRetryStore) Grant(_ context.Context, key string, n int, ttl time.Duration, data []byte) error {
	if n <= 0 || ttl <= 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if c, ok := s.m[key]; ok && now.Before(c.exp) {
		return nil
	}
	if len(s.m) >= s.max {
		for k, c := range s.m {
			if !now.Before(c.exp) {
				delete(s.m, k)
			}
		}
		if len(s.m) >= s.max {
			return fmt.Errorf("memory retry store holds %d grants: %w", s.max, ErrRetryStoreUnavailable)
		}
	}
	s.m[key] = &credit{n: n, data: append([]byte(nil), data...), exp: now.Add(ttl)}
	return nil
}

// Use implements RetryStore.
func (s *MemoryRetryStore) Use(_ context.Context, key string) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[key]
	if !ok {
		return nil, false, nil
	}
	if !s.now().Before(c.exp) {
		delete(s.m, key)
		return nil, false, nil
	}
	if c.n <= 0 {
		return nil, false, nil // kept until it expires, so a new Grant cannot refill it
	}
	c.n--
	return append([]byte(nil), c.data...), true, nil
}

// Revoke implements RetryStore. The entry stays, empty, until it expires, so a later
// Grant for the same payment cannot refill it.
func (s *MemoryRetryStore) Revoke(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.m[key]; ok {
		c.n = 0
	}
	return nil
}
