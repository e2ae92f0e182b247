// Package x402payment decodes an x402 payment (proposedTx.protocol "payment") into the
// policy engine's action model (docs/policy.md#payment-actions).
package x402payment

import (
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
)

// Kind is the decoded kind of an x402 payment.
const Kind = "x402.payment"

// maxResourceLen bounds PaymentAction.resource.
const maxResourceLen = 4096

// Decoder reads the PaymentAction of an x402 payment, strictly
// (docs/policy.md#payment-actions).
type Decoder struct{}

// Protocol is "payment".
func (Decoder) Protocol() string { return verdict.ProtocolPayment }

var members = map[string]bool{
	"protocol": true, "rail": true, "chainId": true, "payTo": true, "asset": true, "amount": true, "resource": true,
}

// Decode reads proposedTx = {protocol, rail: "x402", chainId, payTo, asset, amount,
// resource?}.
func (Decoder) Decode(tx map[string]any) (*actions.Action, error) {
	for k := range tx {
		if !members[k] {
			return nil, actions.Fail(k, "is not a member of a payment action")
		}
	}
	if r, ok := tx["rail"].(string); !ok || r != verdict.RailX402 {
		return nil, actions.Fail("rail", `must be "x402"`)
	}
	chainID, ok := actions.ChainID(tx["chainId"])
	if !ok {
		return nil, actions.Fail("chainId", "must be a positive integer")
	}
	payTo, de := actions.AddressMember(tx, "payTo")
	if de != nil {
		return nil, de
	}
	asset, de := actions.AddressMember(tx, "asset")
	if de != nil {
		return nil, de
	}
	if asset == (common.Address{}) {
		return nil, actions.Fail("asset", "must be a token contract, not the zero address")
	}
	amountStr, ok := tx["amount"].(string)
	amount, good := actions.BaseUnits(amountStr)
	if !ok || !good {
		return nil, actions.Fail("amount", "must be a decimal string of a positive integer below 2^256, without sign or leading zero")
	}
	payToHex := payTo.Hex()
	fields := map[string]any{
		"rail":   verdict.RailX402,
		"to":     payToHex,
		"payTo":  payToHex,
		"asset":  asset.Hex(),
		"amount": amountStr,
	}
	if raw, present := tx["resource"]; present {
		r, ok := raw.(string)
		if !ok || len(r) > maxResourceLen {
			return nil, actions.Fail("resource", "must be a string of at most 4096 bytes")
		}
		fields["resource"] = r
	}
	return &actions.Action{
		Protocol:   verdict.ProtocolPayment,
		ChainID:    chainID,
		Kind:       Kind,
		Fields:     fields,
		Recipients: []common.Address{payTo},
		Assets:     []common.Address{asset},
		Notional:   []actions.Amount{{Asset: asset, Value: amount}},
	}, nil
}

var _ actions.Decoder = Decoder{}
