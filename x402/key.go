package x402

import (
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/common"
)

// PaymentKey identifies exactly one payment: the exact payer, payee, amount, asset,
// network and signed nonce (docs/facilitator.md#approval-records). Two keys are equal only
// when every field is; addresses are compared as 20-byte values, so case never matters.
type PaymentKey struct {
	Network string // CAIP-2
	Asset   common.Address
	Payer   common.Address
	PayTo   common.Address
	Amount  *big.Int
	Nonce   [32]byte
}

// KeyOf is the PaymentKey of p paying r: the signed payer, payee, amount and nonce, on
// r's asset and p's network.
func KeyOf(p *Payment, r *Requirements) PaymentKey {
	return PaymentKey{
		Network: p.Network,
		Asset:   r.Asset,
		Payer:   p.Authorization.From,
		PayTo:   p.Authorization.To,
		Amount:  p.Authorization.Value,
		Nonce:   p.Authorization.Nonce,
	}
}

// String is the canonical, lower-case form of k, used as a Redis key suffix and a
// journal column. It carries no secret.
func (k PaymentKey) String() string {
	amount := "0"
	if k.Amount != nil {
		amount = k.Amount.String()
	}
	return strings.ToLower(fmt.Sprintf("%s:%s:%s:%s:%s:0x%x",
		k.Network, k.Asset.Hex(), k.Payer.Hex(), k.PayTo.Hex(), amount, k.Nonce[:]))
}

// AuthorizationKey identifies one EIP-3009 authorization on chain, whatever it pays:
// the token contract enforces single use per (asset, payer, nonce).
func (k PaymentKey) AuthorizationKey() string {
	return strings.ToLower(fmt.Sprintf("%s:%s:%s:0x%x", k.Network, k.Asset.Hex(), k.Payer.Hex(), k.Nonce[:]))
}

// VerifyInput is one /verify call in normalised form (docs/facilitator.md#verify).
type VerifyInput struct {
	Payment      *Payment
	Requirements *Requirements
	// VerificationRequirements is the verdict service's fee requirement, when the caller
	// asks for the verdict check; nil otherwise.
	VerificationRequirements *Requirements
	// VerificationPayment is the client's second EIP-3009 authorization that pays the
	// verification fee; nil when no fee applies.
	VerificationPayment *Payment
}
