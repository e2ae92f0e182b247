package approval

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/x402gate/x402gate/x402"
)

// DefaultMemoryStoreSize is the number of approval records, and separately of settlement
// claims, that a MemoryStore holds when NewMemoryStore is given a size <= 0.
const DefaultMemoryStoreSize = 100_000

// DefaultMaxTTL is the longest TTL a MemoryStore accepts for a record or a claim unless
// WithMaxTTL sets another.
const DefaultMaxTTL = time.Hour

// ErrInvalidTTL is returned by Record and Claim for a TTL that is not positive, or longer
// than the store's maximum. Such a record would either vanish at once or outlive the
// cache that holds it, so it is refused rather than silently shortened.
var ErrInvalidTTL = errors.New("approval store: ttl out of range")

// MemoryStore is the embedded Store of a single instance: two bounded LRU caches
// (golang-lru/v2 simplelru), one for approvals and one for claims, whose entries carry
// their own expiry. It starts no goroutine, so a store that a reload drops leaks
// nothing; expired entries are dropped when read, and expired claims when the claim
// table is full.
//
// Unlike the store the spec describes as the default (docs/facilitator.md#settle-order rule 2: "a
// non-atomic read then delete"), every operation runs under one mutex, so Consume is a
// true get-and-delete and exactly one of any number of concurrent Claims wins within the
// process. It shares nothing with other processes: several instances need RedisStore.
//
// When the approval cache is full, recording evicts the least recently used approval,
// whose settle is then refused (fail closed). When the claim cache is full of unexpired
// claims, Claim refuses with ErrUnavailable instead of evicting a live claim.
type MemoryStore struct {
	maxTTL time.Duration
	size   int

	mu        sync.Mutex
	closed    bool
	approvals *simplelru.LRU[string, memApproval]
	claims    *simplelru.LRU[string, time.Time] // authorization key -> claim expiry
	verdicts  *simplelru.LRU[string, memVerdict]
}

// memApproval carries the record's own expiry, checked on read.
type memApproval struct {
	approval  Approval
	expiresAt time.Time
}

// memVerdict is a remembered verdict with its own expiry.
type memVerdict struct {
	verdict   Verdict
	expiresAt time.Time
}

// MemoryStoreOption configures a MemoryStore.
type MemoryStoreOption func(*MemoryStore)

// WithMaxTTL sets the longest TTL the store accepts for a record or a claim. Default
// DefaultMaxTTL.
func WithMaxTTL(d time.Duration) MemoryStoreOption {
	return func(s *MemoryStore) {
		if d > 0 {
			s.maxTTL = d
		}
	}
}

// NewMemoryStore returns an in-process Store holding at most size approvals and
// size claims (DefaultMemoryStoreSize when size <= 0).
func NewMemoryStore(size int, opts ...MemoryStoreOption) *MemoryStore {
	if size <= 0 {
		size = DefaultMemoryStoreSize
	}
	s := &MemoryStore{maxTTL: DefaultMaxTTL, size: size}
	for _, o := range opts {
		o(s)
	}
	// simplelru.NewLRU fails only for a size <= 0, excluded above.
	s.approvals, _ = simplelru.NewLRU[string, memApproval](size, nil)
	s.claims, _ = simplelru.NewLRU[string, time.Time](size, nil)
	s.verdicts, _ = simplelru.NewLRU[string, memVerdict](size, nil)
	return s
}

func (s *MemoryStore) checkTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > s.maxTTL {
		return fmt.Errorf("%w: %s not in (0, %s]", ErrInvalidTTL, ttl, s.maxTTL)
	}
	return nil
}

var errMemoryStoreClosed = fmt.Errorf("%w: memory store closed", ErrUnavailable)

// Record stores a for k until ttl elapses. While an earlier approval for k is unexpired it
// is kept as it is and Record succeeds, as RedisStore's SET NX does.
func (s *MemoryStore) Record(ctx context.Context, k x402.PaymentKey, a Approval, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("record approval: %w", err)
	}
	if err := s.checkTTL(ttl); err != nil {
		return fmt.Errorf("record approval: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errMemoryStoreClosed
	}
	key, now := k.String(), time.Now()
	if e, ok := s.approvals.Peek(key); ok && now.Before(e.expiresAt) {
		return nil
	}
	s.approvals.Add(key, memApproval{approval: a, expiresAt: now.Add(ttl)})
	return nil
}

// Consume atomically removes and returns the unexpired approval for k (docs/facilitator.md#settle-order
// rule 1). An expired record is removed too, and reported as ErrNotFound.
func (s *MemoryStore) Consume(ctx context.Context, k x402.PaymentKey) (Approval, error) {
	if err := ctx.Err(); err != nil {
		return Approval{}, fmt.Errorf("consume approval: %w", err)
	}
	key := k.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Approval{}, errMemoryStoreClosed
	}
	e, ok := s.approvals.Peek(key)
	if !ok {
		return Approval{}, ErrNotFound
	}
	s.approvals.Remove(key)
	if !time.Now().Before(e.expiresAt) {
		return Approval{}, ErrNotFound
	}
	return e.approval, nil
}

// Claim atomically marks the authorization of k as being settled, for ttl. It returns
// ErrAlreadyClaimed while an earlier claim is unexpired.
func (s *MemoryStore) Claim(ctx context.Context, k x402.PaymentKey, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("claim authorization: %w", err)
	}
	if err := s.checkTTL(ttl); err != nil {
		return fmt.Errorf("claim authorization: %w", err)
	}
	key := k.AuthorizationKey()
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errMemoryStoreClosed
	}
	if until, ok := s.claims.Peek(key); ok && now.Before(until) {
		return ErrAlreadyClaimed
	}
	if s.claims.Len() >= s.size {
		// Evicting a live claim could let a second settle of that authorization through:
		// drop the expired ones, and refuse when none has expired.
		for _, k := range s.claims.Keys() {
			if until, ok := s.claims.Peek(k); ok && !now.Before(until) {
				s.claims.Remove(k)
			}
		}
		if s.claims.Len() >= s.size {
			return fmt.Errorf("%w: claim table full (%d unexpired claims)", ErrUnavailable, s.size)
		}
	}
	s.claims.Add(key, now.Add(ttl))
	return nil
}

// RememberVerdict keeps v for k until ttl elapses; an unexpired earlier verdict stands. A
// full table evicts the least recently used verdict, which only means its payment may be
// asked about once more.
func (s *MemoryStore) RememberVerdict(ctx context.Context, k x402.PaymentKey, v Verdict, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("remember verdict: %w", err)
	}
	if err := s.checkTTL(ttl); err != nil {
		return fmt.Errorf("remember verdict: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errMemoryStoreClosed
	}
	key, now := k.String(), time.Now()
	if e, ok := s.verdicts.Peek(key); ok && now.Before(e.expiresAt) {
		return nil
	}
	s.verdicts.Add(key, memVerdict{verdict: v, expiresAt: now.Add(ttl)})
	return nil
}

// RecallVerdict returns the unexpired remembered verdict of k, or ErrNotFound.
func (s *MemoryStore) RecallVerdict(ctx context.Context, k x402.PaymentKey) (Verdict, error) {
	if err := ctx.Err(); err != nil {
		return Verdict{}, fmt.Errorf("recall verdict: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Verdict{}, errMemoryStoreClosed
	}
	e, ok := s.verdicts.Peek(k.String())
	if !ok || !time.Now().Before(e.expiresAt) {
		return Verdict{}, ErrNotFound
	}
	return e.verdict, nil
}

// Close drops every record and claim. Later calls return ErrUnavailable.
func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.approvals.Purge()
	s.claims.Purge()
	s.verdicts.Purge()
	return nil
}

var _ Store = (*MemoryStore)(nil)
