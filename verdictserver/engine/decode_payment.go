package engine

import (
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
)

// KindPayment is the decoded kind of an x402 payment.
const KindPayment = "x402.payment"

// maxResourceLen bounds PaymentAction.resource.
const maxResourceLen = 4096

// paymentDecoder reads the PaymentAction of an x402 payment, strictly
// (docs/policy.md#payment-actions).
type paymentDecoder struct{}

func (paymentDecoder) Protocol() string { return verdict.ProtocolPayment }

var paymentMembers = map[string]bool{
	"protocol": true, "rail": true, "chainId": true, "payTo": true, "asset": true, "amount": true, "resource": true,
}

func (paymentDecoder) Decode(tx map[string]any) (*Action, error) {
	for k := range tx {
		if !paymentMembers[k] {
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
	return &Action{
		Protocol:   verdict.ProtocolPayment,
		ChainID:    chainID,
		Kind:       KindPayment,
		Fields:     fields,
		Recipients: []common.Address{payTo},
		Assets:     []common.Address{asset},
		Notional:   []Amount{{Asset: asset, Value: amount}},
	}, nil
}
