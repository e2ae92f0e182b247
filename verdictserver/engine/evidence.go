package engine

import (
	"math/big"
	"sort"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/internal/intern"
)

// decodedAction is evidence.decodedAction for act (docs/policy.md#evidence): its fields,
// then what the checks read, then its legs, each rendered the same way.
func (ev *evaluation) decodedAction(act *Action) map[string]any {
	return ev.renderAction(act, 0)
}

func (ev *evaluation) renderAction(act *Action, depth int) map[string]any {
	return ev.renderActionInto(nil, act, depth)
}

// renderActionInto is renderAction into out, an empty map, or a new one when out is nil.
func (ev *evaluation) renderActionInto(out map[string]any, act *Action, depth int) map[string]any {
	n := len(act.Fields) + 5 // protocol, chainId, kind, recipients, assets
	if act.To != nil {
		n += 2
	}
	for _, present := range [...]bool{len(act.Coins) > 0, len(act.CoinAmounts) > 0 || len(act.Notional) > 0,
		len(act.Stranded) > 0, act.Trade != nil, len(act.Allowances) > 0, len(act.Legs) > 0 && depth < actions.MaxLegDepth} {
		if present {
			n++
		}
	}
	if out == nil {
		out = make(map[string]any, n)
	}
	for k, v := range act.Fields {
		switch x := v.(type) {
		case common.Address:
			out[k] = ev.hexAny(x)
		case []common.Address:
			out[k] = ev.hexes(x)
		default:
			out[k] = v
		}
	}
	out["protocol"] = boxString(act.Protocol)
	out["chainId"] = boxInt64(act.ChainID)
	out["kind"] = boxString(act.Kind)
	if act.To != nil {
		out["to"] = ev.hexAny(*act.To)
		out["selector"] = boxString(act.Selector)
	}
	out["recipients"] = ev.hexes(recipientsOf(act)) // an allowance's spender is one (docs/policy.md#pricing)
	out["assets"] = ev.hexes(act.Assets)
	if len(act.Coins) > 0 {
		out["coins"] = act.Coins
	}
	if len(act.CoinAmounts) > 0 {
		amounts := make([]map[string]any, len(act.CoinAmounts))
		for i, c := range act.CoinAmounts {
			amounts[i] = map[string]any{"coin": c.Coin, "amount": ev.ratString(c.Amount)}
		}
		out["amounts"] = amounts
	}
	if len(act.Stranded) > 0 {
		out["stranded"] = ev.hexes(act.Stranded)
	}
	if act.Notional != nil && len(act.Notional) > 0 {
		amounts := make(notionalAmounts, len(act.Notional))
		for i, a := range act.Notional {
			amounts[i] = notionalAmount{Amount: decimal(a.Value), Asset: ev.hexAny(a.Asset)}
		}
		out["amounts"] = amounts
	}
	if t := act.Trade; t != nil {
		out["trade"] = ev.renderTrade(t)
	}
	if len(act.Allowances) > 0 {
		aps := make([]map[string]any, len(act.Allowances))
		for i, a := range act.Allowances {
			aps[i] = map[string]any{"spender": ev.hexAny(a.Spender), "asset": ev.hexAny(a.Asset), "amount": decimal(a.Amount), "unlimited": a.Unlimited}
		}
		out["approvals"] = aps
	}
	if len(act.Legs) > 0 && depth < actions.MaxLegDepth {
		legs := make([]map[string]any, 0, len(act.Legs))
		for _, l := range act.Legs {
			if l != nil {
				legs = append(legs, ev.renderActionInto(ev.legMap(), l, depth+1))
			}
		}
		out["legs"] = legs
	}
	return out
}

// legMap is an empty map for a leg's decodedAction from the recycled box being filled
// (Judge), or nil (a new map) when there is none or none is left.
func (ev *evaluation) legMap() map[string]any {
	b := ev.box
	if b == nil || b.nLegs == len(b.legs) {
		if b != nil && len(b.legs) < maxRecycledLegs {
			b.legs = append(b.legs, make(map[string]any, 16))
			b.nLegs++
			return b.legs[b.nLegs-1]
		}
		return nil
	}
	b.nLegs++
	return b.legs[b.nLegs-1]
}

func (ev *evaluation) renderTrade(t *Trade) any {
	var lev, limit, size any
	if t.Leverage != nil {
		lev = ev.ratString(t.Leverage)
	}
	if t.LimitPrice != nil {
		limit = ev.ratString(t.LimitPrice)
	}
	if t.Size != nil {
		size = ev.ratString(t.Size)
	}
	switch {
	case t.Kind == TradeSwap && t.ExactOut:
		return &swapOutTrade{AmountOut: decimal(t.AmountOut), AssetIn: ev.hexAny(t.AssetIn), AssetOut: ev.hexAny(t.AssetOut), ExactOut: true,
			Kind: t.Kind, Leverage: lev, LimitPrice: limit, Market: t.Market, MaxIn: decimal(t.MaxIn), ReduceOnly: t.ReduceOnly, Side: t.Side, Size: size}
	case t.Kind == TradeSwap:
		return &swapInTrade{AmountIn: decimal(t.AmountIn), AssetIn: ev.hexAny(t.AssetIn), AssetOut: ev.hexAny(t.AssetOut),
			Kind: t.Kind, Leverage: lev, LimitPrice: limit, Market: t.Market, MinOut: decimal(t.MinOut), ReduceOnly: t.ReduceOnly, Side: t.Side, Size: size}
	}
	return &orderTrade{Kind: t.Kind, Leverage: lev, LimitPrice: limit, Market: t.Market, ReduceOnly: t.ReduceOnly, Side: t.Side, Size: size}
}

// decodedAction.trade, by kind of trade (docs/policy.md#evidence). Members are in the order
// encoding/json writes a map's keys, so each encodes exactly as the map {member: value}
// would; the optional ones are left out when empty.
type (
	swapInTrade struct {
		AmountIn   any    `json:"amountIn"`
		AssetIn    any    `json:"assetIn"`
		AssetOut   any    `json:"assetOut"`
		ExactOut   bool   `json:"exactOut"`
		Kind       string `json:"kind"`
		Leverage   any    `json:"leverage,omitempty"`
		LimitPrice any    `json:"limitPrice,omitempty"`
		Market     string `json:"market,omitempty"`
		MinOut     any    `json:"minOut"`
		ReduceOnly bool   `json:"reduceOnly,omitempty"`
		Side       string `json:"side,omitempty"`
		Size       any    `json:"size,omitempty"`
	}
	swapOutTrade struct {
		AmountOut  any    `json:"amountOut"`
		AssetIn    any    `json:"assetIn"`
		AssetOut   any    `json:"assetOut"`
		ExactOut   bool   `json:"exactOut"`
		Kind       string `json:"kind"`
		Leverage   any    `json:"leverage,omitempty"`
		LimitPrice any    `json:"limitPrice,omitempty"`
		Market     string `json:"market,omitempty"`
		MaxIn      any    `json:"maxIn"`
		ReduceOnly bool   `json:"reduceOnly,omitempty"`
		Side       string `json:"side,omitempty"`
		Size       any    `json:"size,omitempty"`
	}
	orderTrade struct {
		Kind       string `json:"kind"`
		Leverage   any    `json:"leverage,omitempty"`
		LimitPrice any    `json:"limitPrice,omitempty"`
		Market     string `json:"market,omitempty"`
		ReduceOnly bool   `json:"reduceOnly,omitempty"`
		Side       string `json:"side,omitempty"`
		Size       any    `json:"size,omitempty"`
	}
)

// notionalAmount is an entry of a priced action's decodedAction.amounts: its JSON is that of
// the map {"amount", "asset"} (members in the order encoding/json writes a map's keys), in
// one slice for every entry instead of a map each.
type notionalAmount struct {
	Amount any `json:"amount"`
	Asset  any `json:"asset"`
}

type notionalAmounts []notionalAmount

// AppendJSON appends a's JSON, what encoding/json writes for it (a verdict.JSONAppender).
func (a notionalAmounts) AppendJSON(b []byte) ([]byte, error) {
	return verdict.AppendJSONArray(b, a, appendNotional)
}

func appendNotional(b []byte, n notionalAmount) ([]byte, error) {
	b, err := verdict.AppendJSONValue(append(b, `{"amount":`...), n.Amount)
	if err != nil {
		return b, err
	}
	b, err = verdict.AppendJSONValue(append(b, `,"asset":`...), n.Asset)
	return append(b, '}'), err
}

func decimal(n *big.Int) any {
	if n == nil {
		return nil
	}
	return n.String()
}

// ratString is ratString(r), written once per evaluation: an order's limit price is in its
// decodedAction and in execution_price_bound's observation.
func (ev *evaluation) ratString(r *big.Rat) any {
	if r == nil {
		return nil
	}
	for i := 0; i < ev.nRats; i++ {
		if ev.rats[i].r == r {
			return ev.rats[i].s
		}
	}
	s := ratString(r)
	if ev.nRats < len(ev.rats) {
		ev.rats[ev.nRats] = ratText{r, s}
		ev.nRats++
	}
	return s
}

// ratText is a Rat ratString wrote.
type ratText struct {
	r *big.Rat
	s any
}

// ratString writes r as a plain decimal, exact to 18 places, without trailing zeros.
func ratString(r *big.Rat) any {
	if r == nil {
		return nil
	}
	if r.IsInt() {
		return r.Num().String() // what FloatString(18) gives, trimmed below, in fewer allocations
	}
	s := r.FloatString(18)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// hex is a.Hex(); EIP-55 costs a Keccak-256, so it is cached (intern.go).
func (ev *evaluation) hex(a common.Address) string { return intern.Checksum(a).Val }

// hexAny is a.Hex() as an interface value, for evidence.
func (ev *evaluation) hexAny(a common.Address) any { return intern.Checksum(a).Box }

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
