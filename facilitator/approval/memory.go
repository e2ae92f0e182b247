package approval

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

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

// MemoryStore is the embedded Store of a single instance: bounded LRU tables (lru), one
// for approvals, one for claims and one for verdicts, whose entries carry their own
// expiry. It starts no goroutine, so a store that a reload drops leaks
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
	approvals *lru[memKey, memApproval]
	claims    *lru[memKey, time.Time] // authorization key -> claim expiry
	verdicts  *lru[memKey, memVerdict]
}

// memKey is a payment key (paymentKey) or an authorization key (authorizationKey) as the
// store holds it: 32 bytes, where the text of x402.PaymentKey.String would take about 220.
type memKey [32]byte

// paymentKey is the SHA-256 of an injective encoding of what k.String() says: the
// lower-case network, the three addresses, the amount ("0" when nil), the nonce and
// whether it is a Permit2 payment. Two keys share a paymentKey exactly when their
// String()s are equal.
func paymentKey(k x402.PaymentKey) memKey {
	amount := "0"
	if k.Amount != nil {
		amount = k.Amount.String()
	}
	var buf [256]byte
	b := append(buf[:0], 'p')
	if k.Permit2 {
		b[0] = 'P'
	}
	b = appendField(b, strings.ToLower(k.Network))
	b = append(append(append(b, k.Asset[:]...), k.Payer[:]...), k.PayTo[:]...)
	b = appendField(b, amount)
	return sha256.Sum256(append(b, k.Nonce[:]...))
}

// authorizationKey is the same for what k.AuthorizationKey() says: network, asset (the
// Permit2 contract for a Permit2 payment), payer and nonce. Its first byte differs from a
// paymentKey's encoding.
func authorizationKey(k x402.PaymentKey) memKey {
	var buf [128]byte
	b := append(buf[:0], 'a')
	b = appendField(b, strings.ToLower(k.Network))
	holder := k.Asset
	if k.Permit2 {
		holder = x402.Permit2Address
	}
	b = append(append(b, holder[:]...), k.Payer[:]...)
	return sha256.Sum256(append(b, k.Nonce[:]...))
}

// appendField appends v with its length first, so that no two field lists encode alike.
func appendField(b []byte, v string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// memApproval is an Approval as the store holds it, with the record's own expiry, checked
// on read. The usual approval (a requestHash of the verdict service's form, "0x" and 64
// lower-case hex digits, and times after 1970) is kept as 32 bytes and two unix
// nanosecond counts; any other is kept whole in odd.
type memApproval struct {
	hash       [32]byte
	recordedAt int64 // unix nanoseconds
	approvalTo int64 // Approval.ExpiresAt, unix nanoseconds
	odd        *Approval
	expiresAt  time.Time
}

func toMem(a Approval, expiresAt time.Time) memApproval {
	m := memApproval{expiresAt: expiresAt}
	h, ok := canonicalHash(a.RequestHash)
	if !ok || !compactTime(a.RecordedAt) || !compactTime(a.ExpiresAt) {
		m.odd = &a
		return m
	}
	m.hash, m.recordedAt, m.approvalTo = h, a.RecordedAt.UnixNano(), a.ExpiresAt.UnixNano()
	return m
}

func (m memApproval) approval() Approval {
	if m.odd != nil {
		return *m.odd
	}
	return Approval{
		RequestHash: "0x" + hex.EncodeToString(m.hash[:]),
		RecordedAt:  time.Unix(0, m.recordedAt), ExpiresAt: time.Unix(0, m.approvalTo),
	}
}

// compactTime reports whether t is the same instant once kept as unix nanoseconds: after
// 1970 and before 2262.
func compactTime(t time.Time) bool {
	return t.After(time.Unix(0, 0)) && t.Before(time.Unix(0, math.MaxInt64))
}

// canonicalHash reads h when it is "0x" and 64 lower-case hex digits, the only form whose
// text comes back byte for byte from its 32 bytes.
func canonicalHash(h string) ([32]byte, bool) {
	var out [32]byte
	if len(h) != 66 || h[:2] != "0x" || strings.ToLower(h) != h {
		return out, false
	}
	if _, err := hex.Decode(out[:], []byte(h[2:])); err != nil {
		return out, false
	}
	return out, true
}

// memVerdict is a remembered verdict with its own expiry.
type memVerdict struct {
	verdict   FirstVerdict
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
	s.approvals = newLRU[memKey, memApproval](size)
	s.claims = newLRU[memKey, time.Time](size)
	s.verdicts = newLRU[memKey, memVerdict](size)
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
	key, now := paymentKey(k), time.Now()
	if e, ok := s.approvals.Peek(key); ok && now.Before(e.expiresAt) {
		return nil
	}
	s.approvals.Add(key, toMem(a, now.Add(ttl)))
	return nil
}

// Consume atomically removes and returns the unexpired approval for k (docs/facilitator.md#settle-order
// rule 1). An expired record is removed too, and reported as ErrNotFound.
func (s *MemoryStore) Consume(ctx context.Context, k x402.PaymentKey) (Approval, error) {
	if err := ctx.Err(); err != nil {
		return Approval{}, fmt.Errorf("consume approval: %w", err)
	}
	key := paymentKey(k)
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
	return e.approval(), nil
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
	key := authorizationKey(k)
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
func (s *MemoryStore) RememberVerdict(ctx context.Context, k x402.PaymentKey, v FirstVerdict, ttl time.Duration) error {
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
	key, now := paymentKey(k), time.Now()
	if e, ok := s.verdicts.Peek(key); ok && now.Before(e.expiresAt) {
		return nil
	}
	s.verdicts.Add(key, memVerdict{verdict: v, expiresAt: now.Add(ttl)})
	return nil
}

// RecallVerdict returns the unexpired remembered verdict of k, or ErrNotFound.
func (s *MemoryStore) RecallVerdict(ctx context.Context, k x402.PaymentKey) (FirstVerdict, error) {
	if err := ctx.Err(); err != nil {
		return FirstVerdict{}, fmt.Errorf("recall verdict: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return FirstVerdict{}, errMemoryStoreClosed
	}
	e, ok := s.verdicts.Peek(paymentKey(k))
	if !ok || !time.Now().Before(e.expiresAt) {
		return FirstVerdict{}, ErrNotFound
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
