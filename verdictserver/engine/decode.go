package engine

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"

	"github.com/ethereum/go-ethereum/common"
	"github.com/x402gate/x402gate/verdictserver/engine/internal/intern"
)

// The decoders (docs/policy.md#actions). Each protocol's decoder reads a proposedTx into the
// Action model (action.go) and has its own files: decode_payment.go (x402 payments),
// decode_evm*.go (the EVM call every EVM protocol shares: its members, the strict ABI reading,
// the chains' assets), decode_erc20.go (the evm protocol: native coin, ERC-20, EIP-2612,
// EIP-3009, WETH), decode_permit2.go, decode_uniswap.go (the V2 and V3 routers),
// decode_universal.go and decode_v4.go (the Universal Router), decode_registry.go (the known
// contracts those read), decode_hyperliquid*.go. A decoder never reads a policy nor decides
// an outcome; the checks (checks*.go, exposure.go, feeds.go, report.go, evidence.go) read only
// the Action. This file holds what every decoder shares.

// Decoder turns the proposedTx of one protocol into an Action. Decode must refuse, with a
// *DecodeError, anything it does not fully understand (docs/policy.md#default-deny).
type Decoder interface {
	// Protocol is the proposedTx.protocol this decoder reads, e.g. "payment".
	Protocol() string
	// Decode reads tx, whose "protocol" is Protocol().
	Decode(tx map[string]any) (*Action, error)
}

// SenderDecoder is a Decoder whose actions depend on who sends them: an EVM router's
// address(1) placeholder is msg.sender, the agent's wallet (Input.Escrow). The engine calls
// DecodeFor instead of Decode when a decoder has it.
type SenderDecoder interface {
	Decoder
	DecodeFor(tx map[string]any, sender common.Address) (*Action, error)
}

// scratchDecoder is a Decoder that can decode into an actionScratch.
type scratchDecoder interface {
	decodeInto(tx map[string]any, sender common.Address, s *actionScratch) (*Action, error)
}

// DecodeError is a proposedTx a decoder could not read: the field at fault, as a dotted
// path from the request ("proposedTx.amount"), and why.
type DecodeError struct {
	Field   string
	Problem string
}

// Error returns "field: problem".
func (e *DecodeError) Error() string { return e.Field + ": " + e.Problem }

// decode finds the decoder for proposedTx.protocol (docs/policy.md#default-deny: none is a
// decode failure).
func (e *Evaluator) decode(tx map[string]any, sender common.Address, s *actionScratch) (act *Action, de *DecodeError) {
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
	if sd, ok := d.(scratchDecoder); ok {
		act, err = sd.decodeInto(tx, sender, s)
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
// at most maxLegDepth deep, and carry only trades of a known kind.
func complete(act *Action, protocol string, depth int) bool {
	if act == nil || act.Protocol != protocol || act.ChainID <= 0 || act.Kind == "" || depth > maxLegDepth {
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

// maxUint256 is 2^256 - 1: no token amount is larger.
var maxUint256 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))

// fail is a DecodeError at proposedTx.member.
func fail(member, problem string) *DecodeError {
	return &DecodeError{Field: "proposedTx." + member, Problem: problem}
}

// addressMember reads a 20-byte address; a mixed-case one must carry its EIP-55 checksum.
func addressMember(tx map[string]any, member string) (common.Address, *DecodeError) {
	s, ok := tx[member].(string)
	if !ok {
		return common.Address{}, fail(member, "must be a 20-byte address string")
	}
	a, ok := intern.StrictAddress(s)
	if !ok {
		return common.Address{}, fail(member, "must be a 20-byte address: 0x and 40 hex digits, EIP-55 when mixed case")
	}
	return a, nil
}

// baseUnits reads a canonical decimal integer in 1..2^256-1.
func baseUnits(s string) (*big.Int, bool) {
	if s == "" || len(s) > 78 || s[0] == '0' {
		return nil, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return nil, false
		}
	}
	n, ok := new(big.Int).SetString(s, 10)
	return n, ok && n.Sign() > 0 && n.Cmp(maxUint256) <= 0
}

// chainIDOf reads a chain id: a JSON integer (json.Number without fraction or exponent,
// or a Go integer) > 0 that fits in 64 bits.
func chainIDOf(v any) (int64, bool) { return intOf(v, 1, math.MaxInt64) }

// undecoded is the decodedAction of an action that could not be decoded
// (docs/policy.md#evidence): what could be read, and the problem.
func undecoded(tx map[string]any, de *DecodeError) map[string]any {
	p, _ := tx["protocol"].(string)
	if p == "" {
		p = "unknown"
	}
	c, ok := chainIDOf(tx["chainId"])
	if !ok {
		c = 1
	}
	return map[string]any{"protocol": p, "chainId": c, "kind": "undecoded", "problem": de.Error()}
}

// intOf reads a JSON integer (json.Number without fraction or exponent, or a Go integer)
// in lo..hi.
func intOf(v any, lo, hi int64) (int64, bool) {
	var n int64
	switch x := v.(type) {
	case json.Number:
		i, err := strconv.ParseInt(x.String(), 10, 64)
		if err != nil {
			return 0, false
		}
		n = i
	case int64:
		n = x
	case int:
		n = int64(x)
	default:
		return 0, false
	}
	return n, n >= lo && n <= hi
}

// grant records an allowance of amt of token to spender; unlimited is the amount the token or
// Permit2 treats as infinite. docs/policy.md#pricing prices it at its amount and counts the
// spender as a recipient, whatever the amount.
func grant(act *Action, spender, token common.Address, amt, unlimited *big.Int) {
	act.Assets = appendNew(act.Assets, token)
	act.Allowances = append(act.Allowances, Allowance{Spender: spender, Asset: token, Amount: amt, Unlimited: amt.Cmp(unlimited) >= 0})
}
