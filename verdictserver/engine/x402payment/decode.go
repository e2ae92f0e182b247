// Package x402payment decodes an x402 payment (proposedTx.protocol "payment") into the
// policy engine's action model (docs/policy.md#payment-actions).
package x402payment

import (
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
	"github.com/x402gate/x402gate/x402"
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
	"scheme": true, "transfer": true,
}

// Decode reads proposedTx = {protocol, rail: "x402", chainId, payTo, asset, amount,
// resource?, scheme?, transfer?}. scheme and transfer name a payment that is not exact
// over EIP-3009 (docs/policy.md#payment-actions): for upto, amount is the signed maximum,
// which the checks judge.
func (d Decoder) Decode(tx map[string]any) (*actions.Action, error) {
	return d.DecodeInto(tx, common.Address{}, nil)
}

// DecodeInto is Decode, building the action in s (actions.Scratch); a payment's sender
// plays no part in it.
func (Decoder) DecodeInto(tx map[string]any, _ common.Address, s *actions.Scratch) (*actions.Action, error) {
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
	act, _ := s.Action()
	fields := act.Fields
	// addresses as they are: the evidence writes them checksummed (docs/policy.md#evidence)
	var to any = payTo
	fields["rail"], fields["to"], fields["payTo"] = verdict.RailX402, to, to
	fields["asset"], fields["amount"] = asset, amountStr
	if de := readTransfer(tx, fields); de != nil {
		return nil, de
	}
	if raw, present := tx["resource"]; present {
		r, ok := raw.(string)
		if !ok || len(r) > maxResourceLen {
			return nil, actions.Fail("resource", "must be a string of at most 4096 bytes")
		}
		fields["resource"] = r
	}
	act.Protocol, act.ChainID, act.Kind = verdict.ProtocolPayment, chainID, Kind
	act.Recipients, act.Assets = []common.Address{payTo}, []common.Address{asset}
	act.Notional = []actions.Amount{{Asset: asset, Value: amount}}
	return act, nil
}

// readTransfer reads the optional scheme ("exact" or "upto") and transfer ("eip3009" or
// "permit2"); upto moves tokens through Permit2 only. A Permit2 payment's fields carry both
// and name Permit2 (uniswap.Permit2, the contract the engine's Permit2 decoding knows) as
// what moves the payer's tokens.
func readTransfer(tx map[string]any, fields map[string]any) *actions.DecodeError {
	scheme, transfer := x402.SchemeExact, x402.TransferEIP3009
	if raw, present := tx["scheme"]; present {
		s, ok := raw.(string)
		if !ok || (s != x402.SchemeExact && s != x402.SchemeUpto) {
			return actions.Fail("scheme", `must be "exact" or "upto"`)
		}
		scheme = s
	}
	if raw, present := tx["transfer"]; present {
		s, ok := raw.(string)
		if !ok || (s != x402.TransferEIP3009 && s != x402.TransferPermit2) {
			return actions.Fail("transfer", `must be "eip3009" or "permit2"`)
		}
		transfer = s
	}
	if scheme == x402.SchemeUpto && transfer != x402.TransferPermit2 {
		return actions.Fail("transfer", `must be "permit2" for scheme "upto"`)
	}
	if transfer == x402.TransferPermit2 { // exact over EIP-3009 keeps the fields it always had
		fields["scheme"], fields["transfer"], fields["via"] = scheme, transfer, uniswap.Permit2.Hex()
	}
	return nil
}

var _ actions.ScratchDecoder = Decoder{}
