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
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/x402"
)

// The payment is settled before the upstream runs (docs/gate.md#settle-before-proxy). When the
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

// RetryStore keeps the retry credits of paid requests whose upstream failed. Every method
// is atomic across every process that shares the store. tokenHash is the SHA-256 of the
// grant's retry token; the store keeps only it, never the token.
type RetryStore interface {
	// Grant gives key n credits for ttl, bound to tokenHash, and keeps data for Acquire to
	// return. granted is false when key holds a grant already: Grant then changes nothing
	// (a grant is never refilled nor rebound to another token).
	Grant(ctx context.Context, key string, tokenHash []byte, n int, ttl time.Duration, data []byte) (granted bool, err error)
	// Acquire takes one credit of key and holds the grant for lease, and returns its data,
	// when tokenHash equals the grant's (compared in constant time), a credit is left and
	// no lease is held. While a lease is held, Acquire answers CreditBusy and takes
	// nothing, so at most one retry of a payment is in flight. A missing, expired, used-up
	// or revoked grant, or another token hash, is CreditNone.
	Acquire(ctx context.Context, key string, tokenHash []byte, lease time.Duration) (data []byte, status CreditStatus, err error)
	// Peek returns the data of key when tokenHash equals the grant's and a credit is left;
	// it takes nothing and ignores leases.
	Peek(ctx context.Context, key string, tokenHash []byte) (data []byte, ok bool, err error)
	// Release ends the lease of key, so the next retry may take a credit.
	Release(ctx context.Context, key string) error
	// Revoke removes the credits of key.
	Revoke(ctx context.Context, key string) error
}

// CreditStatus is what RetryStore.Acquire found. It is an int, so a store in another
// package (gate/redisretry) implements RetryStore without importing gate.
type CreditStatus = int

// Acquire outcomes.
const (
	// CreditNone: no credit for this key and token; nothing was taken.
	CreditNone CreditStatus = iota
	// CreditTaken: a credit was taken and the lease is held.
	CreditTaken
	// CreditBusy: another retry holds the lease; nothing was taken.
	CreditBusy
)

// retryKey identifies one payment of one request: the exact payer, payee, amount,
// asset, network and nonce (x402.PaymentKey), the resource URL, the method and the request
// URI (path and query), hashed so a long URL makes no long key. A credit earned by GET
// /r?a=1 is not spent on POST /r or GET /r?a=2.
func retryKey(in Input, req *x402.Requirements, p *x402.Payment) string {
	k := x402.PaymentKey{
		Network: req.Network, Asset: req.Asset, Payer: p.Authorization.From,
		PayTo: req.PayTo, Amount: req.Amount, Nonce: p.Authorization.Nonce,
	}
	sum := sha256.Sum256([]byte(k.String() + "\n" + req.Resource.URL + "\n" + in.Method + " " + in.RequestURI))
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
func (g *Gate) armRetry(res *Result, in Input, req *x402.Requirements, p *x402.Payment) {
	if g.route.retryMax <= 0 || g.retries == nil {
		return
	}
	ttl := g.remaining(p)
	if g.route.grace > 0 && g.route.grace < ttl {
		ttl = g.route.grace
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
	res.retryKey, res.retryTTL, res.retryData = retryKey(in, req, p), int64(ttl/time.Millisecond), data
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
	if r := g.useSettledRetry(ctx, in, req, p, hash); r != nil {
		return r
	}
	return g.usePending(ctx, in, req, p, hash)
}

// useSettledRetry takes a credit granted after the upstream failed, and holds its lease
// while the retry's upstream runs.
func (g *Gate) useSettledRetry(ctx context.Context, in Input, req *x402.Requirements, p *x402.Payment, hash []byte) *Result {
	if g.route.retryMax <= 0 {
		return nil
	}
	key := retryKey(in, req, p)
	data, r := g.acquire(ctx, key, hash, req, p)
	if data == nil {
		return r
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

// acquire takes a credit of key with its lease. It returns the credit's data, or nil and
// the answer to give instead: nil when there is no credit (the refusal stands), 409
// retry_in_progress while another retry of the payment holds the lease, 503 when the
// store is unavailable.
func (g *Gate) acquire(ctx context.Context, key string, hash []byte, req *x402.Requirements, p *x402.Payment) ([]byte, *Result) {
	data, status, err := g.retries.Acquire(ctx, key, hash, g.retryLease)
	switch {
	case err != nil:
		g.log.Error("x402 retry store unavailable", zap.Error(err))
		return nil, g.errorResult(req, p.Version, http.StatusServiceUnavailable, ReasonRetryStoreUnavailable, "the retry store is unavailable")
	case status == CreditBusy:
		res := g.errorResult(req, p.Version, http.StatusConflict, ReasonRetryInProgress, "another retry of this payment is in progress; try again when it has answered")
		res.Header.Set("Retry-After", "1")
		return nil, res
	case status != CreditTaken:
		return nil, nil
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// ReportUpstream tells the gate how the upstream answered a settled request, for callers
// of Handle (Serve calls it itself). failed is true for a status >= 500, a connection
// failure or a panic. After a first attempt that failed, the payment earns its retry
// credits, bound to a fresh retry token that ReportUpstream returns: send it to the client
// in the HeaderPaymentRetry header of the failed answer, and nowhere else (no log). Only a
// retry that presents it is let through, one at a time (it holds a lease). After a retry
// that succeeded, its remaining credits are revoked, so a payment buys one good answer;
// after one that failed, the lease is released for the next retry. Call it before the failed answer
// reaches the client, so a quick retry finds its credit. It returns "" and does nothing for
// other results.
func (g *Gate) ReportUpstream(ctx context.Context, res *Result, failed bool) (retryToken string, err error) {
	if res != nil && res.Kind == KindSettled {
		if err := g.endPaymentID(ctx, res, failed); err != nil {
			return "", err
		}
	}
	if res == nil || res.Kind != KindSettled || res.retryKey == "" || g.retries == nil {
		return "", nil
	}
	first := !res.Retry || res.resumed // a resumed pending settlement is the first run
	switch {
	case !first && !failed:
		err = g.retries.Revoke(ctx, res.retryKey)
	case !first && failed:
		err = g.retries.Release(ctx, res.retryKey)
	case first && failed:
		token, hash, terr := newRetryToken()
		if terr != nil {
			g.log.Error("x402 retry token unavailable", zap.Error(terr))
			return "", fmt.Errorf("gate: report upstream: %w", terr)
		}
		var granted bool
		granted, err = g.retries.Grant(ctx, res.retryKey, hash, g.route.retryMax, time.Duration(res.retryTTL)*time.Millisecond, res.retryData)
		if err == nil && granted {
			g.log.Info("x402 upstream failed after settlement; retry granted", zap.String("payer", res.Payer), zap.Int("retries", g.route.retryMax))
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
	m   map[[32]byte]*credit // by the SHA-256 of the key
	max int
	now func() time.Time
	// MemoryPassBook is the pass book of the same instance (docs/gate.md#sign-in-with-x).
	*MemoryPassBook
}

// credit is one grant as the store holds it: fixed-size fields and the data
// (bench/verdict.md). Times are unix nanoseconds of the store's
// clock.
type credit struct {
	hash  [sha256.Size]byte // SHA-256 of the retry token
	n     int32
	exp   int64
	lease int64 // a retry holds the grant until then
	data  []byte
}

// NewMemoryRetryStore returns an empty store holding at most maxEntries grants (0 means
// DefaultMemoryRetryEntries). When it is full of unexpired grants, Grant fails with
// ErrRetryStoreUnavailable rather than evict a paid-for credit silently.
func NewMemoryRetryStore(maxEntries int) *MemoryRetryStore {
	if maxEntries <= 0 {
		maxEntries = DefaultMemoryRetryEntries
	}
	return &MemoryRetryStore{m: map[[32]byte]*credit{}, max: maxEntries, now: time.Now, MemoryPassBook: NewMemoryPassBook(0)}
}

// errNoTokenHash refuses a grant that no token could unlock, or that any would.
var errNoTokenHash = errors.New("retry store: a grant needs its token hash (32 bytes, SHA-256)")

// memKey is a key as the store holds it.
func memKey(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// unlocks reports whether tokenHash is the grant's, in constant time.
func (c *credit) unlocks(tokenHash []byte) bool {
	return len(tokenHash) == sha256.Size && subtle.ConstantTimeCompare(c.hash[:], tokenHash) == 1
}

// Grant implements RetryStore.
func (s *MemoryRetryStore) Grant(_ context.Context, key string, tokenHash []byte, n int, ttl time.Duration, data []byte) (bool, error) {
	if len(tokenHash) != sha256.Size {
		return false, errNoTokenHash
	}
	if n <= 0 || ttl <= 0 {
		return false, nil
	}
	n = min(n, math.MaxInt32)
	k := memKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixNano()
	if c, ok := s.m[k]; ok && now < c.exp {
		return false, nil
	}
	if len(s.m) >= s.max {
		for k, c := range s.m {
			if now >= c.exp {
				delete(s.m, k)
			}
		}
		if len(s.m) >= s.max {
			return false, fmt.Errorf("memory retry store holds %d grants: %w", s.max, ErrRetryStoreUnavailable)
		}
	}
	c := &credit{n: int32(n), exp: now + int64(ttl), data: append([]byte(nil), data...)}
	copy(c.hash[:], tokenHash)
	s.m[k] = c
	return true, nil
}

// Acquire implements RetryStore.
func (s *MemoryRetryStore) Acquire(_ context.Context, key string, tokenHash []byte, lease time.Duration) ([]byte, CreditStatus, error) {
	k := memKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[k]
	if !ok {
		return nil, CreditNone, nil
	}
	now := s.now().UnixNano()
	if now >= c.exp {
		delete(s.m, k)
		return nil, CreditNone, nil
	}
	if !c.unlocks(tokenHash) || c.n <= 0 {
		return nil, CreditNone, nil // kept until it expires, so a new Grant cannot refill it
	}
	if now < c.lease {
		return nil, CreditBusy, nil
	}
	c.n--
	c.lease = now + int64(lease)
	return append([]byte(nil), c.data...), CreditTaken, nil
}

// Peek implements RetryStore.
func (s *MemoryRetryStore) Peek(_ context.Context, key string, tokenHash []byte) ([]byte, bool, error) {
	k := memKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[k]
	if !ok || s.now().UnixNano() >= c.exp || !c.unlocks(tokenHash) || c.n <= 0 {
		return nil, false, nil
	}
	return append([]byte(nil), c.data...), true, nil
}

// Release implements RetryStore.
func (s *MemoryRetryStore) Release(_ context.Context, key string) error {
	k := memKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.m[k]; ok {
		c.lease = 0
	}
	return nil
}

// Revoke implements RetryStore. The entry stays, empty, until it expires, so a later
// Grant for the same payment cannot refill it.
func (s *MemoryRetryStore) Revoke(_ context.Context, key string) error {
	k := memKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.m[k]; ok {
		c.n = 0
	}
	return nil
}
