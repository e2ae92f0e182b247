package pass

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Book remembers what sign-in-with-x needs. Every method is atomic across every process
// that shares the book. gate.MemoryLedger and redisretry.Store implement it; a gate whose
// Ledger does not gets an in-process MemoryBook.
type Book interface {
	// RecordPass remembers that key holds a pass until expiry; a later expiry wins.
	RecordPass(ctx context.Context, key string, expiry time.Time) error
	// PassExpiry returns the latest expiry recorded under any of keys (zero: none).
	PassExpiry(ctx context.Context, keys []string) (time.Time, error)
	// UseNonce marks nonce used for ttl; fresh is false when it was used before.
	UseNonce(ctx context.Context, nonce string, ttl time.Duration) (fresh bool, err error)
}

// errPassBook is wrapped by pass book failures.
var errPassBook = errors.New("pass book unavailable")

// BookKey names the pass of payer for scope on host, issued by a route whose first
// pass key had the id keyID: a route finds only the passes issued under one of its own
// keys (docs/gate.md#sign-in-with-x), as it honours only the pass tokens they signed.
func BookKey(keyID, host, scope, payer string) string {
	sum := sha256.Sum256([]byte(keyID + "\n" + strings.ToLower(host) + "\n" + scope + "\n" + strings.ToLower(payer)))
	return "pass:" + hex.EncodeToString(sum[:])
}

// DefaultMemoryEntries bounds a MemoryBook made with NewMemoryBook(0).
const DefaultMemoryEntries = 100_000

// MemoryBook is the in-process Book of one instance. It is safe for concurrent
// use. Full of live entries, it refuses new ones (fail closed) rather than forget a pass.
type MemoryBook struct {
	mu     sync.Mutex
	passes map[string]time.Time
	nonces map[string]time.Time
	max    int
	now    func() time.Time
}

// NewMemoryBook returns an empty book holding at most maxEntries passes and as many
// nonces (0 means DefaultMemoryEntries).
func NewMemoryBook(maxEntries int) *MemoryBook {
	if maxEntries <= 0 {
		maxEntries = DefaultMemoryEntries
	}
	return &MemoryBook{passes: map[string]time.Time{}, nonces: map[string]time.Time{}, max: maxEntries, now: time.Now}
}

// room makes room in m for one more entry, dropping expired ones; false when it is full.
func (b *MemoryBook) room(m map[string]time.Time) bool {
	if len(m) < b.max {
		return true
	}
	now := b.now()
	for k, exp := range m {
		if !now.Before(exp) {
			delete(m, k)
		}
	}
	return len(m) < b.max
}

// RecordPass implements Book.
func (b *MemoryBook) RecordPass(_ context.Context, key string, expiry time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.passes[key]; ok {
		if expiry.After(old) {
			b.passes[key] = expiry
		}
		return nil
	}
	if !b.room(b.passes) {
		return fmt.Errorf("memory pass book holds %d passes: %w", b.max, errPassBook)
	}
	b.passes[key] = expiry
	return nil
}

// PassExpiry implements Book.
func (b *MemoryBook) PassExpiry(_ context.Context, keys []string) (time.Time, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var latest time.Time
	for _, k := range keys {
		if exp, ok := b.passes[k]; ok && exp.After(latest) {
			latest = exp
		}
	}
	return latest, nil
}

// UseNonce implements Book.
func (b *MemoryBook) UseNonce(_ context.Context, nonce string, ttl time.Duration) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if exp, ok := b.nonces[nonce]; ok && now.Before(exp) {
		return false, nil
	}
	if !b.room(b.nonces) {
		return false, fmt.Errorf("memory pass book holds %d nonces: %w", b.max, errPassBook)
	}
	b.nonces[nonce] = now.Add(ttl)
	return true, nil
}
