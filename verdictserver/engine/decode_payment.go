package engine

import (
	"math"
	"math/big"
	"sort"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
)

// KindPayment is the decoded kind of an x402 payment.
const KindPayment = "x402.payment"

// maxResourceLen bounds PaymentAction.resource.
const maxResourceLen = 4096

// maxUint256 is 2^256 - 1: no token amount is larger.
var maxUint256 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))

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
			return nil, fail(k, "is not a member of a payment action")
		}
	}
	if r, ok := tx["rail"].(string); !ok || r != verdict.RailX402 {
		return nil, fail("rail", `must be "x402"`)
	}
	chainID, ok := chainIDOf(tx["chainId"])
	if !ok {
		return nil, fail("chainId", "must be a positive integer")
	}
	payTo, de := addressMember(tx, "payTo")
	if de != nil {
		return nil, de
	}
	asset, de := addressMember(tx, "asset")
	if de != nil {
		return nil, de
	}
	if asset == (common.Address{}) {
		return nil, fail("asset", "must be a token contract, not the zero address")
	}
	amountStr, ok := tx["amount"].(string)
	amount, good := baseUnits(amountStr)
	if !ok || !good {
		return nil, fail("amount", "must be a decimal string of a positive integer below 2^256, without sign or leading zero")
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
			return nil, fail("resource", "must be a string of at most 4096 bytes")
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

func fail(member, problem string) *DecodeError {
	return &DecodeError{Field: "proposedTx." + member, Problem: problem}
}

// addressMember reads a 20-byte address; a mixed-case one must carry its EIP-55 checksum.
func addressMember(tx map[string]any, member string) (common.Address, *DecodeError) {
	s, ok := tx[member].(string)
	if !ok {
		return common.Address{}, fail(member, "must be a 20-byte address string")
	}
	a, ok := strictAddress(s)
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

// hex is a.Hex(); EIP-55 costs a Keccak-256, so it is cached (intern.go).
func (ev *evaluation) hex(a common.Address) string { return checksum(a).val }

// hexAny is a.Hex() as an interface value, for evidence.
func (ev *evaluation) hexAny(a common.Address) any { return checksum(a).box }

// hexes is as in EIP-55. One slice of addresses asked for again in the same evaluation
// (an action's recipients in their check, in sink_recipient's and in decodedAction) gives
// the same strings: the verdict holds them read only.
func (ev *evaluation) hexes(as []common.Address) []string {
	if len(as) == 0 {
		return make([]string, 0)
	}
	for i := 0; i < ev.nHexed; i++ {
		if h := &ev.hexed[i]; &h.src[0] == &as[0] && len(h.src) == len(as) {
			return h.out
		}
	}
	out := ev.hexesUncached(as)
	if ev.nHexed < len(ev.hexed) {
		ev.hexed[ev.nHexed] = hexedSlice{as, out}
		ev.nHexed++
	}
	return out
}

// hexedSlice is a slice hexes wrote.
type hexedSlice struct {
	src []common.Address
	out []string
}

func (ev *evaluation) hexesUncached(as []common.Address) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = ev.hex(a)
	}
	return out
}

// sortedHexes is a new sorted slice of the EIP-55 forms of as.
func (ev *evaluation) sortedHexes(as []common.Address) []string {
	out := ev.hexesUncached(as)
	sort.Strings(out)
	return out
}
