package engine

import (
	"math/big"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/policy"
)

// The suggested corrections of failed checks (docs/verdict-api.md#observations): what the
// agent can change in its request so that the check passes. They are built only when a
// check fails, off the path of an approval.

// maxSuggested bounds the values a suggestion lists.
const maxSuggested = 8

// useOneOf is the suggestion of an allow-list: use one of its values, or, when it lists none,
// that only the policy's operator can help.
func useOneOf(field string, allowed []string) string {
	if len(allowed) == 0 {
		return noneAllowed(field)
	}
	shown := allowed
	if len(shown) > maxSuggested {
		shown = shown[:maxSuggested]
	}
	s := "use one of " + field + ": " + strings.Join(shown, ", ")
	if len(allowed) > len(shown) {
		s += ", … (" + strconv.Itoa(len(allowed)) + " in all)"
	}
	return s
}

// noneAllowed is the suggestion of an allow-list that allows nothing.
func noneAllowed(field string) string {
	return field + " allows nothing: the policy's operator must add to it"
}

// chainKeys are chain ids written as the policy writes them.
func chainKeys(ids []int64) []string {
	out := make([]string, len(ids))
	for i, c := range ids {
		out[i] = strconv.FormatInt(c, 10)
	}
	return out
}

// recipientsText is recipients.allowed with self written with the agent's wallet.
func (ev *evaluation) recipientsText(allowed []string) []string {
	out := make([]string, len(allowed))
	for i, a := range allowed {
		out[i] = a
		if a == policy.Self {
			out[i] = "self (" + ev.hex(ev.in.Escrow) + ")"
		}
	}
	return out
}

// lowerNotional is per_tx_cap's suggestion: the cap in USD and, for an action that moves one
// amount of one token, that amount scaled down to the cap, in the token's base units.
func (ev *evaluation) lowerNotional(usd *big.Rat, c capValue) string {
	s := "lower the amount to <= " + c.text + " USD"
	act := ev.act
	if len(act.Legs) > 0 || len(act.Notional) != 1 || usd.Sign() <= 0 || c.rat == nil {
		return s
	}
	a := act.Notional[0]
	most := new(big.Rat).Mul(new(big.Rat).SetInt(a.Value), c.rat)
	most.Quo(most, usd)
	units := new(big.Int).Quo(most.Num(), most.Denom()) // rounded down: within the cap
	return s + " (" + units.String() + " base units of " + ev.hex(a.Asset) + ")"
}

// guardSwap is the suggestion for a swap without a slippage guard.
func guardSwap(t *Trade) string {
	if t.ExactOut {
		return "set a maximum input (amountInMaximum or amountInMax) below 2^256-1"
	}
	return "set a non-zero minimum output (amountOutMinimum or amountOutMin)"
}

// boundSlippage is the suggestion for a swap whose guard allows more than maxBps of slippage:
// the least minimum output (exact input) or the largest maximum input (exact output) that
// allows maxBps at the reference prices, in base units; "" without a price.
func (ev *evaluation) boundSlippage(t *Trade, maxBps int) string {
	if t.ExactOut {
		// value in may rise to (1 + maxBps) of value out
		units, ok := ev.unitsWorth(t.AssetOut, t.AmountOut, big.NewRat(int64(10000+maxBps), 10000), t.AssetIn, false)
		if !ok {
			return ""
		}
		return "set amountInMaximum (or amountInMax) <= " + units.String() + " base units of " + ev.hex(t.AssetIn)
	}
	// value out may fall to (1 - maxBps) of value in
	units, ok := ev.unitsWorth(t.AssetIn, t.AmountIn, big.NewRat(int64(10000-maxBps), 10000), t.AssetOut, true)
	if !ok {
		return ""
	}
	return "set amountOutMinimum (or amountOutMin) >= " + units.String() + " base units of " + ev.hex(t.AssetOut)
}

// unitsWorth is how many base units of asset are worth share of amount of from at the
// reference prices, rounded up or down; false without a price for either.
func (ev *evaluation) unitsWorth(from common.Address, amount *big.Int, share *big.Rat, asset common.Address, up bool) (*big.Int, bool) {
	probe := new(big.Int).Exp(big.NewInt(10), big.NewInt(18), nil)
	worth, okFrom := ev.usdOf(ev.act.ChainID, from, amount)
	unit, okUnit := ev.usdOf(ev.act.ChainID, asset, probe) // the price of 10^18 base units
	if !okFrom || !okUnit || unit.Sign() == 0 {
		return nil, false
	}
	r := new(big.Rat).Mul(worth, share)
	r.Mul(r, new(big.Rat).SetInt(probe)).Quo(r, unit)
	units := new(big.Int).Quo(r.Num(), r.Denom())
	if up && !r.IsInt() {
		units.Add(units, big.NewInt(1))
	}
	return units, true
}

// boundLimitPrice is the suggestion for an order whose limit price is too far from the
// reference: the range maxBps around it.
func boundLimitPrice(ref *big.Rat, maxBps int) string {
	d := new(big.Rat).Mul(ref, big.NewRat(int64(maxBps), 10000))
	lo, hi := new(big.Rat).Sub(ref, d), new(big.Rat).Add(ref, d)
	return "set the limit price within " + strconv.Itoa(maxBps) + " bps of the reference " + ratString(ref).(string) +
		": between " + ratString(lo).(string) + " and " + ratString(hi).(string)
}
