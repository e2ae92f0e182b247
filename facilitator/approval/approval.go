// Package approval holds the facilitator's approval records: the short-lived record of an
// approved verdict for one exact payment, consumed by its settle, and the claim that lets
// only one settle of an authorization through. MemoryStore serves one instance, RedisStore
// several. See docs/facilitator.md#approval-records.
package approval

import (
	"context"
	"errors"
	"time"

	"github.com/x402gate/x402gate/x402"
)

// Approval is a recorded terminal "approved" verdict for one x402.PaymentKey.
type Approval struct {
	RequestHash string    `json:"requestHash"`
	RecordedAt  time.Time `json:"recordedAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
}

// FirstVerdict is the remembered first terminal verdict of one exact payment. A repeated
// /verify of it asks the verdict service again, without another fee; the remembered one
// never approves anything by itself (docs/facilitator.md#fresh-verdicts).
type FirstVerdict struct {
	Status      string `json:"status"`
	ReasonCode  string `json:"reasonCode,omitempty"`
	RequestHash string `json:"requestHash,omitempty"`
	// PolicyVersion is the agent's policy version the verdict was judged under, when the
	// service named one.
	PolicyVersion *int64 `json:"policyVersion,omitempty"`
}

// Errors of a Store.
var (
	// ErrNotFound: no unexpired approval for the key (never recorded, expired, or
	// already consumed).
	ErrNotFound = errors.New("no unexpired approval for this payment")
	// ErrAlreadyClaimed: another settle holds or held the claim on this authorization.
	ErrAlreadyClaimed = errors.New("authorization already claimed for settlement")
	// ErrUnavailable wraps every failure to reach a store; callers fail closed on it.
	ErrUnavailable = errors.New("approval store unavailable")
)

// Store holds short-lived approval records and settlement claims. Implementations
// are safe for concurrent use, and Consume and Claim are atomic across every process that
// shares the store (docs/facilitator.md#settle-order rule 2: we do better than the non-atomic default).
type Store interface {
	// Record stores a for k until ttl elapses. While an earlier approval for k is
	// unexpired, that one is kept (its ttl is not extended) and Record succeeds: an
	// approval lives at most ttl from the first approved verdict.
	Record(ctx context.Context, k x402.PaymentKey, a Approval, ttl time.Duration) error
	// Consume atomically removes and returns the unexpired approval for k. It returns
	// ErrNotFound when there is none.
	Consume(ctx context.Context, k x402.PaymentKey) (Approval, error)
	// Claim atomically marks the authorization of k as being settled, for ttl. Exactly one
	// of any number of concurrent claims succeeds; the others get ErrAlreadyClaimed.
	Claim(ctx context.Context, k x402.PaymentKey, ttl time.Duration) error
	// RememberVerdict keeps the terminal verdict v of k for ttl. While an earlier one is
	// unexpired, that one is kept: the first terminal verdict of a payment stands.
	RememberVerdict(ctx context.Context, k x402.PaymentKey, v FirstVerdict, ttl time.Duration) error
	// RecallVerdict returns the remembered verdict of k, or ErrNotFound.
	RecallVerdict(ctx context.Context, k x402.PaymentKey) (FirstVerdict, error)
	// Close releases the store's connections.
	Close() error
}
