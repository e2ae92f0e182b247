package actions

import (
	"encoding/json"
	"math"
	"math/big"
	"slices"
	"strconv"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/internal/intern"
)

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

// ScratchDecoder is a Decoder that can build its actions in a Scratch: the engine calls
// DecodeInto, with the evaluation's scratch, instead of DecodeFor or Decode.
type ScratchDecoder interface {
	DecodeInto(tx map[string]any, sender common.Address, s *Scratch) (*Action, error)
}

// DecodeError is a proposedTx a decoder could not read: the field at fault, as a dotted
// path from the request ("proposedTx.amount"), and why.
type DecodeError struct {
	Field   string
	Problem string
}

// Error returns "field: problem".
func (e *DecodeError) Error() string { return e.Field + ": " + e.Problem }

// MaxUint256 is 2^256 - 1: no token amount is larger.
var MaxUint256 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))

// Fail is a DecodeError at proposedTx.member.
func Fail(member, problem string) *DecodeError {
	return &DecodeError{Field: "proposedTx." + member, Problem: problem}
}

// AddressMember reads a 20-byte address; a mixed-case one must carry its EIP-55 checksum.
func AddressMember(tx map[string]any, member string) (common.Address, *DecodeError) {
	s, ok := tx[member].(string)
	if !ok {
		return common.Address{}, Fail(member, "must be a 20-byte address string")
	}
	a, ok := intern.StrictAddress(s)
	if !ok {
		return common.Address{}, Fail(member, "must be a 20-byte address: 0x and 40 hex digits, EIP-55 when mixed case")
	}
	return a, nil
}

// BaseUnits reads a canonical decimal integer in 1..2^256-1.
func BaseUnits(s string) (*big.Int, bool) {
	if s == "" || len(s) > 78 || s[0] == '0' {
		return nil, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return nil, false
		}
	}
	n, ok := new(big.Int).SetString(s, 10)
	return n, ok && n.Sign() > 0 && n.Cmp(MaxUint256) <= 0
}

// ChainID reads a chain id: a JSON integer (json.Number without fraction or exponent,
// or a Go integer) > 0 that fits in 64 bits.
func ChainID(v any) (int64, bool) { return Int(v, 1, math.MaxInt64) }

// Int reads a JSON integer (json.Number without fraction or exponent, or a Go integer)
// in lo..hi.
func Int(v any, lo, hi int64) (int64, bool) {
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

// Grant records an allowance of amt of token to spender; unlimited is the amount the token or
// Permit2 treats as infinite. docs/policy.md#pricing prices it at its amount and counts the
// spender as a recipient, whatever the amount.
func Grant(act *Action, spender, token common.Address, amt, unlimited *big.Int) {
	act.Assets = AppendNew(act.Assets, token)
	act.Allowances = append(act.Allowances, Allowance{Spender: spender, Asset: token, Amount: amt, Unlimited: amt.Cmp(unlimited) >= 0})
}

// AppendNew is list with a appended, unless list holds it already.
func AppendNew(list []common.Address, a common.Address) []common.Address {
	if slices.Contains(list, a) {
		return list
	}
	return append(list, a)
}
