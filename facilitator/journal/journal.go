// Package journal is the facilitator's settlement journal: a durable row per EIP-3009
// authorization, written before its transaction is broadcast, so that one authorization is
// broadcast once and a restart can finish what it left. DB keeps it in SQLite for one
// instance or PostgreSQL for several. See docs/facilitator.md#settlement-journal.
package journal

import (
	"context"
	"errors"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// State is the lifecycle of one journaled settlement.
type State string

// Settlement states. A row is written as StatePrepared, with the signed transaction and its
// hash, before anything is broadcast; the outcome is written after.
const (
	StatePrepared  State = "prepared"  // signed, not yet known to be sent
	StateBroadcast State = "broadcast" // sent; receipt not yet seen
	StateConfirmed State = "confirmed" // receipt with status 1 and a matching Transfer
	StateFailed    State = "failed"    // reverted, dropped, or refused before broadcast
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
	// Sender is the signer lane (its address) that signed the transaction: its nonce is
	// SenderNonce, and its key signs any fee bump. Zero for rows of builds before the pool.
	Sender    common.Address
	State     State
	Reason    string // internal reason code when failed
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Errors of a Journal.
var (
	// ErrDuplicateSettlement: the journal already holds a settlement for this authorization.
	ErrDuplicateSettlement = errors.New("settlement already journaled for this authorization")
	// ErrNotFound: no row for the authorization key.
	ErrNotFound = errors.New("settlement not found")
)

// Journal is the durable settlement journal: one row per authorization, written before
// its transaction is broadcast, with every fee-bumped replacement of that transaction. DB
// implements it on SQLite (embedded) and PostgreSQL (shared).
type Journal interface {
	// Prepare inserts s in StatePrepared. It returns ErrDuplicateSettlement when a row for
	// s.AuthorizationKey exists, whatever its state: one authorization is broadcast once.
	Prepare(ctx context.Context, s Settlement) error
	// PrepareAll is Prepare of several rows in one transaction: every row is written, or
	// none. When rows for some keys exist it writes nothing and returns a
	// *DuplicatesError (errors.Is ErrDuplicateSettlement) naming them.
	PrepareAll(ctx context.Context, rows []Settlement) error
	// Update moves the row of authorizationKey to state, recording reason.
	Update(ctx context.Context, authorizationKey string, state State, reason string) error
	// UpdateSettled is Update that also records txHash, the attempt whose receipt decided
	// the row.
	UpdateSettled(ctx context.Context, authorizationKey string, state State, reason string, txHash common.Hash) error
	// UpdateLater is UpdateSettled (Update when settled is nil) whose caller does not
	// wait for the write to be durable; then, when set, gets its outcome. Only for a move a
	// crash may lose because Reconcile makes it again: to StateBroadcast or StateConfirmed.
	UpdateLater(authorizationKey string, state State, reason string, settled *common.Hash, then func(error))
	// Get returns the row of authorizationKey, or ErrNotFound.
	Get(ctx context.Context, authorizationKey string) (Settlement, error)
	// Unfinished returns every row in StatePrepared or StateBroadcast, oldest first.
	Unfinished(ctx context.Context) ([]Settlement, error)
	// AddAttempt records replacement a (a.Seq = the previous attempt's Seq + 1) of the
	// unfinished row of authorizationKey, before a is broadcast. It returns
	// ErrAttemptConflict when a.Seq is taken or the row is closed, ErrNotFound
	// for an unknown key.
	AddAttempt(ctx context.Context, authorizationKey string, a Attempt) error
	// Attempts returns every attempt of the row, the first (Seq 0) first.
	Attempts(ctx context.Context, authorizationKey string) ([]Attempt, error)
	// Close releases the database.
	Close() error
}

// ErrInvalidTransition is returned by Update for a move the settlement lifecycle does not
// allow: nothing returns to StatePrepared, nothing leaves StateConfirmed, and a failed
// settlement can only turn out confirmed (a receipt found late). Repeating the current
// state is allowed, so two reconcilers may record the same outcome.
var ErrInvalidTransition = errors.New("settlement state transition not allowed")

// transitions lists, for each target state, the states Update may move from.
var transitions = map[State][]State{
	StateBroadcast: {StatePrepared, StateBroadcast},
	StateConfirmed: {StatePrepared, StateBroadcast, StateFailed, StateConfirmed},
	StateFailed:    {StatePrepared, StateBroadcast, StateFailed},
}

// Attempt is one signed transaction of a settlement: the first (Seq 0, the row's TxHash
// and RawTx) or a fee-bumped replacement (Seq 1, 2, ...) with the same sender nonce and
// calldata and higher fees. At most one attempt of a row can ever be mined.
type Attempt struct {
	Seq       int
	TxHash    common.Hash
	RawTx     []byte
	CreatedAt time.Time
	// Settled marks the attempt whose receipt closed the row (see UpdateSettled).
	Settled bool
}

// ErrAttemptConflict is returned by AddAttempt when the attempt's sequence number is taken
// (another reconciler bumped the row first) or the row is no longer unfinished. Nothing
// may be broadcast then.
var ErrAttemptConflict = errors.New("settlement attempt conflicts with the journal")
