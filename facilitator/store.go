package facilitator

import (
	"context"
	"errors"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/x402"
)

// Approval is a recorded terminal "approved" verdict for one x402.PaymentKey.
type Approval struct {
	RequestHash string    `json:"requestHash"`
	RecordedAt  time.Time `json:"recordedAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
}

// Errors of an ApprovalStore.
var (
	// ErrApprovalNotFound: no unexpired approval for the key (never recorded, expired, or
	// already consumed).
	ErrApprovalNotFound = errors.New("no unexpired approval for this payment")
	// ErrAlreadyClaimed: another settle holds or held the claim on this authorization.
	ErrAlreadyClaimed = errors.New("authorization already claimed for settlement")
	// ErrStoreUnavailable wraps every failure to reach a store; callers fail closed on it.
	ErrStoreUnavailable = errors.New("approval store unavailable")
)

// ApprovalStore holds short-lived approval records and settlement claims. Implementations
// are safe for concurrent use, and Consume and Claim are atomic across every process that
// shares the store (spec §4.2 /settle rule 2: we do better than the non-atomic default).
type ApprovalStore interface {
	// Record stores a for k until ttl elapses. While an earlier approval for k is
	// unexpired, that one is kept (its ttl is not extended) and Record succeeds: an
	// approval lives at most ttl from the first approved verdict.
	Record(ctx context.Context, k x402.PaymentKey, a Approval, ttl time.Duration) error
	// Consume atomically removes and returns the unexpired approval for k. It returns
	// ErrApprovalNotFound when there is none.
	Consume(ctx context.Context, k x402.PaymentKey) (Approval, error)
	// Claim atomically marks the authorization of k as being settled, for ttl. Exactly one
	// of any number of concurrent claims succeeds; the others get ErrAlreadyClaimed.
	Claim(ctx context.Context, k x402.PaymentKey, ttl time.Duration) error
	// Close releases the store's connections.
	Close() error
}

// SettlementState is the lifecycle of one journaled settlement.
type SettlementState string

// Settlement states. A row is written as StatePrepared, with the signed transaction and its
// hash, before anything is broadcast; the outcome is written after.
const (
	StatePrepared  SettlementState = "prepared"  // signed, not yet known to be sent
	StateBroadcast SettlementState = "broadcast" // sent; receipt not yet seen
	StateConfirmed SettlementState = "confirmed" // receipt with status 1 and a matching Transfer
	StateFailed    SettlementState = "failed"    // reverted, dropped, or refused before broadcast
)

// Settlement is one row of the settlement journal.
type Settlement struct {
	AuthorizationKey string // x402.PaymentKey.AuthorizationKey(); unique in the journal
	PaymentKey       string // x402.PaymentKey.String()
	Network          string
	Asset            common.Address
	Payer            common.Address
	PayTo            common.Address
	Amount           *big.Int
	Nonce            [32]byte
	TxHash           common.Hash
	RawTx            []byte // the signed transaction, so reconcile can finish it without signing anew
	SenderNonce      uint64 // the facilitator account's nonce the transaction uses
	State            SettlementState
	Reason           string // internal reason code when failed
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// Errors of a Journal.
var (
	// ErrDuplicateSettlement: the journal already holds a settlement for this authorization.
	ErrDuplicateSettlement = errors.New("settlement already journaled for this authorization")
	// ErrSettlementNotFound: no row for the authorization key.
	ErrSettlementNotFound = errors.New("settlement not found")
)

// Journal is the durable settlement journal: SQLite embedded, PostgreSQL shared. One schema,
// migrated at Open.
type Journal interface {
	// Prepare inserts s in StatePrepared. It returns ErrDuplicateSettlement when a row for
	// s.AuthorizationKey exists, whatever its state: one authorization is broadcast once.
	Prepare(ctx context.Context, s Settlement) error
	// Update moves the row of authorizationKey to state, recording reason.
	Update(ctx context.Context, authorizationKey string, state SettlementState, reason string) error
	// Get returns the row of authorizationKey, or ErrSettlementNotFound.
	Get(ctx context.Context, authorizationKey string) (Settlement, error)
	// Unfinished returns every row in StatePrepared or StateBroadcast, oldest first.
	Unfinished(ctx context.Context) ([]Settlement, error)
	// Close releases the database.
	Close() error
}
