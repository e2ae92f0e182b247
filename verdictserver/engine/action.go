package engine

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"
)

// Decoder turns the proposedTx of one protocol into an Action. Decode must refuse, with a
// *DecodeError, anything it does not fully understand (docs/policy.md#default-deny).
type Decoder interface {
	// Protocol is the proposedTx.protocol this decoder reads, e.g. "payment".
	Protocol() string
	// Decode reads tx, whose "protocol" is Protocol().
	Decode(tx map[string]any) (*Action, error)
}

// DecodeError is a proposedTx a decoder could not read: the field at fault, as a dotted
// path from the request ("proposedTx.amount"), and why.
type DecodeError struct {
	Field   string
	Problem string
}

// Error returns "field: problem".
func (e *DecodeError) Error() string { return e.Field + ": " + e.Problem }

// Action is a decoded action: what the checks read (docs/policy.md#evidence). A field a
// decoder leaves empty makes the checks that need it not_checked.
type Action struct {
	// Protocol is proposedTx.protocol.
	Protocol string
	// ChainID is the chain the action runs on, > 0.
	ChainID int64
	// Kind names the decoded shape, e.g. "x402.payment".
	Kind string
	// Fields are further members of evidence.decodedAction (JSON values), e.g. payTo.
	Fields map[string]any
	// To is the contract the agent calls; nil when the action is not a contract call.
	To *common.Address
	// Selector is the 4-byte selector called on To ("0x" + 8 hex, or "0x" for none).
	Selector string
	// Recipients are the addresses value goes to.
	Recipients []common.Address
	// Assets are the token contracts the action moves.
	Assets []common.Address
	// Screen are further addresses to screen for sanctions, beside the escrow, To, the
	// recipients and the assets.
	Screen []common.Address
	// Notional is what the action moves, priced for per_tx_cap.
	Notional []Amount
}

// Amount is a quantity of a token in base units.
type Amount struct {
	Asset common.Address
	Value *big.Int
}
