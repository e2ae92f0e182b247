package x402

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"
)

// Requirements is the version-neutral form of one payment requirement: the network as a
// CAIP-2 id and the price as Amount in the asset's base units, whichever version it came in.
type Requirements struct {
	Scheme            string
	Network           string // CAIP-2, e.g. "eip155:84532"
	Amount            *big.Int
	Asset             common.Address
	PayTo             common.Address
	MaxTimeoutSeconds int
	Resource          ResourceInfo
	OutputSchema      map[string]any // v1 only; omitted when nil
	Extra             map[string]any // for EIP-3009: {"name": …, "version": …}
}

// Authorization is a parsed EIP-3009 TransferWithAuthorization.
type Authorization struct {
	From        common.Address
	To          common.Address
	Value       *big.Int
	ValidAfter  *big.Int
	ValidBefore *big.Int
	Nonce       [32]byte
}

// Payment is the version-neutral form of a payment payload (X-PAYMENT or
// PAYMENT-SIGNATURE).
type Payment struct {
	Version   int           // the x402Version it arrived with
	Scheme    string        // "exact" or "upto"
	Network   string        // CAIP-2
	Accepted  *Requirements // v2: the requirement the client chose; nil for v1
	Resource  *ResourceInfo // v2: the resource the client paid for; nil for v1
	Signature []byte
	// Authorization is the EIP-3009 authorization; for a Permit2 payment, the same facts
	// of Permit2 (payer, payee, permitted amount, validAfter, the deadline as validBefore,
	// the nonce as 32 bytes), which nothing signs in this form.
	Authorization Authorization
	// Permit2 is the Permit2 authorization of a Permit2 payment; nil for EIP-3009.
	Permit2    *Permit2Authorization
	Extensions map[string]any
}

// Transfer is how p moves the token: TransferPermit2 or TransferEIP3009.
func (p *Payment) Transfer() string {
	if p.Permit2 != nil {
		return TransferPermit2
	}
	return TransferEIP3009
}
