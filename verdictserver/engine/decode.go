package engine

import (
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
)

// The decoders (docs/policy.md#actions) are packages beside this one, one per protocol:
// x402payment (x402 payments), erc20 (the evm protocol: native coin, ERC-20, EIP-2612,
// EIP-3009, WETH), uniswap (the V2 and V3 routers, the Universal Router and its v4 actions,
// Permit2, the registry of known contracts) and hyperliquid; evmcall reads the EVM call that
// erc20 and uniswap share. Each builds the model of package actions and never reads a policy
// nor decides an outcome; the checks (checks*.go, exposure.go, feeds.go, report.go,
// evidence.go) read only the Action. This file finds a proposedTx's decoder and checks what
// it returns.

// decode finds the decoder for proposedTx.protocol (docs/policy.md#default-deny: none is a
// decode failure).
func (e *Evaluator) decode(tx map[string]any, sender common.Address, s *actions.Scratch) (act *Action, de *DecodeError) {
	defer func() {
		// docs/policy.md#default-deny: a decoder that panics has not understood the action.
		if r := recover(); r != nil {
			act, de = nil, &DecodeError{Field: "proposedTx", Problem: "the decoder failed on this action"}
		}
	}()
	if tx == nil {
		return nil, &DecodeError{Field: "proposedTx", Problem: "is required"}
	}
	p, ok := tx["protocol"].(string)
	if !ok || p == "" {
		return nil, &DecodeError{Field: "proposedTx.protocol", Problem: "must be a non-empty string"}
	}
	d, ok := e.decoders[p]
	if !ok {
		return nil, &DecodeError{Field: "proposedTx.protocol", Problem: "no decoder for this protocol"}
	}
	var err error
	if sd, ok := d.(actions.ScratchDecoder); ok {
		act, err = sd.DecodeInto(tx, sender, s)
	} else if sd, ok := d.(SenderDecoder); ok {
		act, err = sd.DecodeFor(tx, sender)
	} else {
		act, err = d.Decode(tx)
	}
	if err != nil {
		if de, ok := err.(*DecodeError); ok {
			return nil, de
		}
		return nil, &DecodeError{Field: "proposedTx", Problem: err.Error()}
	}
	if !complete(act, p, 0) {
		return nil, &DecodeError{Field: "proposedTx", Problem: "the decoder returned an incomplete action"}
	}
	return act, nil
}

// complete reports whether act and its legs name the protocol, one chain and a kind, nest
// at most actions.MaxLegDepth deep, and carry only trades of a known kind.
func complete(act *Action, protocol string, depth int) bool {
	if act == nil || act.Protocol != protocol || act.ChainID <= 0 || act.Kind == "" || depth > actions.MaxLegDepth {
		return false
	}
	if t := act.Trade; t != nil && t.Kind != TradeSwap && t.Kind != TradeOrder && t.Kind != TradeLeverage {
		return false
	}
	for _, l := range act.Legs {
		if !complete(l, protocol, depth+1) || l.ChainID != act.ChainID {
			return false
		}
	}
	return true
}

// undecoded is the decodedAction of an action that could not be decoded
// (docs/policy.md#evidence): what could be read, and the problem.
func undecoded(tx map[string]any, de *DecodeError) map[string]any {
	p, _ := tx["protocol"].(string)
	if p == "" {
		p = "unknown"
	}
	c, ok := actions.ChainID(tx["chainId"])
	if !ok {
		c = 1
	}
	return map[string]any{"protocol": p, "chainId": c, "kind": "undecoded", "problem": de.Error()}
}
