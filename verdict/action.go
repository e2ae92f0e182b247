package verdict

import (
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/x402"
)

// PaymentAction is the proposedTx of an x402 payment (docs/verdict.md#paymentaction). It is built by copying
// fields, not by a canonical decode: the verdict is about where the signed authorization
// sends money, which token and how much.
type PaymentAction struct {
	// Protocol is always "payment" (a preview value, docs/verdict.md#paymentaction).
	Protocol string `json:"protocol"`
	// Rail is always "x402".
	Rail string `json:"rail"`
	// ChainID is 8453 (Base) or 84532 (Base Sepolia), from the requirements' network.
	ChainID int64 `json:"chainId"`
	// PayTo is the authorization's "to", EIP-55 checksummed.
	PayTo string `json:"payTo"`
	// Asset is the requirements' token contract, EIP-55 checksummed.
	Asset string `json:"asset"`
	// Amount is the authorization's value in token base units, as a decimal string: for a
	// Permit2 payment the permitted amount, which for upto is the most that can move.
	Amount string `json:"amount"`
	// Resource is the paid resource's URL, omitted when unknown.
	Resource string `json:"resource,omitempty"`
	// Scheme and Transfer name a payment that is not exact over EIP-3009: scheme "exact"
	// or "upto", transfer "permit2" (docs/policy.md#payment-actions). Both are omitted for
	// exact over EIP-3009, whose action is as before.
	Scheme   string `json:"scheme,omitempty"`
	Transfer string `json:"transfer,omitempty"`
}

// Payment action constants (docs/verdict.md#paymentaction).
const (
	ProtocolPayment = "payment"
	RailX402        = "x402"
)

// paymentNetworks are the networks a PaymentAction may name: x402's built-in networks,
// Base (8453) and Base Sepolia (84532), the two chain ids docs/verdict.md#paymentaction
// allows. A registry a caller extends is not consulted.
var paymentNetworks = x402.NewRegistry()

// networkChainID returns the chain id of network, spelled as a CAIP-2 id or a v1 name (a bare
// decimal chain id is not a network spelling here).
func networkChainID(network string) (int64, bool) {
	n, ok := paymentNetworks.Lookup(network)
	if !ok || (network != n.CAIP2 && network != n.Name) || !n.ChainID.IsInt64() {
		return 0, false
	}
	return n.ChainID.Int64(), true
}

// NewPaymentAction copies a normalised payment and its requirements into a PaymentAction
// (docs/verdict.md#paymentaction) and also returns the escrow address, which is authorization.from (docs/gate.md#results).
// Every problem is an *InputError.
func NewPaymentAction(p *x402.Payment, r *x402.Requirements) (PaymentAction, common.Address, error) {
	var zero common.Address
	if p == nil {
		return PaymentAction{}, zero, &InputError{Field: "paymentPayload", Problem: "is required"}
	}
	if r == nil {
		return PaymentAction{}, zero, &InputError{Field: "paymentRequirements", Problem: "is required"}
	}
	chainID, ok := networkChainID(r.Network)
	if !ok {
		return PaymentAction{}, zero, &InputError{Field: "paymentRequirements.network", Problem: "must be eip155:8453 or eip155:84532"}
	}
	if p.Network != "" {
		if pc, ok := networkChainID(p.Network); !ok || pc != chainID {
			return PaymentAction{}, zero, &InputError{Field: "paymentPayload.network", Problem: "does not match the requirements' network"}
		}
	}
	a := p.Authorization
	switch {
	case a.From == zero:
		return PaymentAction{}, zero, &InputError{Field: "paymentPayload.payload.authorization.from", Problem: "is required"}
	case a.To == zero:
		return PaymentAction{}, zero, &InputError{Field: "paymentPayload.payload.authorization.to", Problem: "is required"}
	case a.Value == nil || a.Value.Sign() <= 0:
		return PaymentAction{}, zero, &InputError{Field: "paymentPayload.payload.authorization.value", Problem: "must be a positive integer"}
	case r.Asset == zero:
		return PaymentAction{}, zero, &InputError{Field: "paymentRequirements.asset", Problem: "is required"}
	}
	act := PaymentAction{
		Protocol: ProtocolPayment,
		Rail:     RailX402,
		ChainID:  chainID,
		PayTo:    a.To.Hex(),
		Asset:    r.Asset.Hex(),
		Amount:   a.Value.String(),
		Resource: r.Resource.URL,
	}
	if act.Resource == "" && p.Resource != nil {
		act.Resource = p.Resource.URL // v2 carries the resource beside the requirements
	}
	if p.Permit2 != nil {
		act.Scheme, act.Transfer = p.Scheme, x402.TransferPermit2
	}
	return act, a.From, nil
}
