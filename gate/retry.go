package gate

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/x402"
)

// The payment is settled before the upstream runs (DESIGN.md "A paid request"). When the
// upstream then fails (a status >= 500, a connection failure, a panic), the payer has paid
// for nothing. The gate grants the payment retry credits, bound to a secret retry token
// that only the paying client receives, in the X-PAYMENT-RETRY header of the failed
// answer. The same payment header together with that token, presented again within the
// grace window, reaches the upstream without a second charge, at most RetryConfig.Max
// times. The facilitator proves the header is the settled one (its signature checks out
// and its nonce is used on chain); the token proves the presenter is the client that got
// the failed answer: once settled, the whole signed authorization is public in the
// transaction's calldata, so the payment header alone proves nothing about who sends it.
// The credits are kept in a RetryStore, shared through Redis by several instances; the
// store keeps only the token's SHA-256.

// HeaderPaymentRetry carries the retry token. The gate sets it on the failed answer of a
// paid request that earned retry credits; the client sends it back, with the same payment
// header, to retry. It is a secret of the payer: the gate strips it from the request before
// the upstream and never logs it.
const HeaderPaymentRetry = "X-PAYMENT-RETRY"

// retryTokenBytes is the entropy of a retry token; it travels as lowercase hex.
const retryTokenBytes = 32

// maxRetryTTL bounds a grant when the authorization's validBefore is far away.
const maxRetryTTL = 24 * time.Hour

// ErrRetryStoreUnavailable is wrapped by every failure to reach a RetryStore. The gate
// fails closed on it: no credit is used, nothing is proxied.
var ErrRetryStoreUnavailable = errors.New("retry store unavailable")

// RetryStore keeps the retry credits of paid requests whose upstream failed. Grant, Use
// and Revoke are atomic across every process that shares the store. tokenHash is the
// SHA-256 of the grant's retry token; the store keeps only it, never the token.
type RetryStore interface {
	// Grant gives key n credits for ttl, bound to tokenHash, and keeps data for Use to
	// return. granted is false when key holds a grant already: Grant then changes nothing
	// (a grant is never refilled nor rebound to another token).
	Grant(ctx context.Context, key string, tokenHash []byte, n int, ttl time.Duration, data []byte) (granted bool, err error)
	// Use atomically takes one credit of key and returns its data, when tokenHash equals
	// the grant's (compared in constant time). ok is false, and nothing is taken, when the
	// hash differs or key has no credit left: never granted, expired, used up or revoked.
	Use(ctx context.Context, key string, tokenHash []byte) (data []byte, ok bool, err error)
	// Peek is Use that takes nothing: it returns the data of key when tokenHash equals the
	// grant's and a credit is left.
	Peek(ctx context.Context, key string, tokenHash []byte) (data []byte, ok bool, err error)
	// Revoke removes the credits of key.
	Revoke(ctx context.Context, key string) error
}

// retryKey identifies one payment of one resource: the exact payer, payee, amount, asset,
// network and nonce (x402.PaymentKey) and the resource URL, hashed so a long URL
// makes no long key.
func retryKey(req *x402.Requirements, p *x402.Payment) string {
	k := x402.PaymentKey{
		Network: req.Network, Asset: req.Asset, Payer: p.Authorization.From,
		PayTo: req.PayTo, Amount: req.Amount, Nonce: p.Authorization.Nonce,
	}
	sum := sha256.Sum256([]byte(k.String() + "\n" + req.Resource.URL))
	return "retry:" + hex.EncodeToString(sum[:])
}

// newRetryToken returns a fresh retry token (hex of 32 random bytes) and its hash.
func newRetryToken() (token string, hash []byte, err error) {
	raw := make([]byte, retryTokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", nil, fmt.Errorf("retry token: %w", err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(raw), sum[:], nil
}

// retryTokenHash returns the hash of the retry token a request presents; ok is false when
// it presents none, more than one, or one that is not 64 hex digits.
func retryTokenHash(h http.Header) (hash []byte, ok bool) {
	vs := h.Values(HeaderPaymentRetry)
	if len(vs) != 1 {
		return nil, false
	}
	v := strings.TrimSpace(vs[0])
	if len(v) != 2*retryTokenBytes {
		return nil, false
	}
	raw, err := hex.DecodeString(v)
	if err != nil {
		return nil, false
	}
	sum := sha256.Sum256(raw)
	return sum[:], true
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

// useRetry takes a retry credit for a payment the facilitator refused as already settled,
// when the request presents the grant's retry token. It returns nil when there is no
// credit for this payment and token, so the refusal stands: a missing or wrong token
// consumes and revokes nothing. A token of a pending-settlement credit is handled by
// usePending.
func (g *Gate) useRetry(ctx context.Context, in Input, req *x402.Requirements, p *x402.Payment) *Result {
	if g.retries == nil {
		return nil
	}
	hash, ok := retryTokenHash(in.Header)
	if !ok {
		return nil
	}
	if r := g.useSettledRetry(ctx, req, p, hash); r != nil {
		return r
	}
	return g.usePending(ctx, req, p, hash)
}

// useSettledRetry takes a credit granted after the upstream failed.
func (g *Gate) useSettledRetry(ctx context.Context, req *x402.Requirements, p *x402.Payment, hash []byte) *Result {
	if g.rt.retryMax <= 0 {
		return nil
	}
	key := retryKey(req, p)
	data, ok, err := g.retries.Use(ctx, key, hash)
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
// credits, bound to a fresh retry token that ReportUpstream returns: send it to the client
// in the HeaderPaymentRetry header of the failed answer, and nowhere else (no log). Only a
// retry that presents it is let through. After a retry that succeeded, its remaining
// credits are revoked, so a payment buys one good answer. Call it before the failed answer
// reaches the client, so a quick retry finds its credit. It returns "" and does nothing for
// other results.
func (g *Gate) ReportUpstream(ctx context.Context, res *Result, failed bool) (retryToken string, err error) {
	if res == nil || res.Kind != KindSettled || res.retryKey == "" || g.retries == nil {
		return "", nil
	}
	first := !res.Retry || res.resumed // a resumed pending settlement is the first run
	switch {
	case !first && !failed:
		err = g.retries.Revoke(ctx, res.retryKey)
	case first && failed:
		token, hash, terr := newRetryToken()
		if terr != nil {
			g.log.Error("x402 retry token unavailable", zap.Error(terr))
			return "", fmt.Errorf("gate: report upstream: %w", terr)
		}
		var granted bool
		granted, err = g.retries.Grant(ctx, res.retryKey, hash, g.rt.retryMax, time.Duration(res.retryTTL)*time.Millisecond, res.retryData)
		if err == nil && granted {
			g.log.Info("x402 upstream failed after settlement; retry granted", zap.String("payer", res.Payer), zap.Int("retries", g.rt.retryMax))
			retryToken = token
		}
	}
	if err != nil {
		g.log.Error("x402 retry store unavailable", zap.Error(err))
		return "", fmt.Errorf("gate: report upstream: %w", err)
	}
	return retryToken, nil
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
	hash []byte // SHA-256 of the retry token
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

// errNoTokenHash refuses a grant that no token could unlock, or that any would.
var errNoTokenHash = errors.New("retry store: a grant needs its token hash")

// Grant implements RetryStore.
func (s *MemoryRetryStore) Grant(_ context.Context, key string, tokenHash []byte, n int, ttl time.Duration, data []byte) (bool, error) {
	if len(tokenHash) == 0 {
		return false, errNoTokenHash
	}
	if n <= 0 || ttl <= 0 {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if c, ok := s.m[key]; ok && now.Before(c.exp) {
		return false, nil
	}
	if len(s.m) >= s.max {
		for k, c := range s.m {
			if !now.Before(c.exp) {
				delete(s.m, k)
			}
		}
		if len(s.m) >= s.max {
			return false, fmt.Errorf("memory retry store holds %d grants: %w", s.max, ErrRetryStoreUnavailable)
		}
	}
	s.m[key] = &credit{
		n: n, hash: append([]byte(nil), tokenHash...), data: append([]byte(nil), data...), exp: now.Add(ttl),
	}
	return true, nil
}

// Use implements RetryStore.
func (s *MemoryRetryStore) Use(_ context.Context, key string, tokenHash []byte) ([]byte, bool, error) {
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
	if len(tokenHash) == 0 || subtle.ConstantTimeCompare(c.hash, tokenHash) != 1 {
		return nil, false, nil
	}
	if c.n <= 0 {
		return nil, false, nil // kept until it expires, so a new Grant cannot refill it
	}
	c.n--
	return append([]byte(nil), c.data...), true, nil
}

// Peek implements RetryStore.
func (s *MemoryRetryStore) Peek(_ context.Context, key string, tokenHash []byte) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[key]
	if !ok || !s.now().Before(c.exp) || len(tokenHash) == 0 || subtle.ConstantTimeCompare(c.hash, tokenHash) != 1 || c.n <= 0 {
		return nil, false, nil
	}
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
