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
	// Permit2 marks a Permit2 payment: Nonce is its Permit2 nonce, which Permit2 spends
	// once per payer whatever the token, and Amount the permitted amount (upto's maximum).
	// (It sits here, in the padding before Amount, so the key is no larger.)
	Permit2 bool
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
		Permit2: p.Permit2 != nil,
	}
}

// String is the canonical, lower-case form of k, used as a Redis key suffix and a
// journal column. It carries no secret.
func (k PaymentKey) String() string {
	amount := "0"
	if k.Amount != nil {
		amount = k.Amount.String()
	}
	s := strings.ToLower(fmt.Sprintf("%s:%s:%s:%s:%s:0x%x",
		k.Network, k.Asset.Hex(), k.Payer.Hex(), k.PayTo.Hex(), amount, k.Nonce[:]))
	if k.Permit2 {
		s += permit2KeySuffix
	}
	return s
}

// permit2KeySuffix ends the String of a Permit2 payment's key.
const permit2KeySuffix = ":permit2"

// IsPermit2Key reports whether s, a PaymentKey's String, is a Permit2 payment's.
func IsPermit2Key(s string) bool { return strings.HasSuffix(s, permit2KeySuffix) }

// AuthorizationKey identifies one authorization on chain, whatever it pays: an EIP-3009
// token enforces single use per (asset, payer, nonce), and Permit2 per (payer, nonce) over
// every token, so a Permit2 payment's key names the Permit2 contract instead of the asset.
func (k PaymentKey) AuthorizationKey() string {
	holder := k.Asset
	if k.Permit2 {
		holder = Permit2Address
	}
	return strings.ToLower(fmt.Sprintf("%s:%s:%s:0x%x", k.Network, holder.Hex(), k.Payer.Hex(), k.Nonce[:]))
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
