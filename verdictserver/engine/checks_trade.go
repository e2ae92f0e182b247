package engine

import (
	"math/big"
	"slices"
	"strconv"
	"time"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/policy"
)

// The four trading checks read Action.Trade on the action and every leg
// (docs/policy.md#trades).

// trades returns the trades of the action and its legs whose kind is one of kinds.
func (ev *evaluation) trades(kinds ...string) []*Action {
	var out []*Action
	ev.act.Walk(func(a *Action) {
		if a.Trade != nil && slices.Contains(kinds, a.Trade.Kind) {
			out = append(out, a)
		}
	})
	return out
}

// sidesOf is what a trade needs from trading.sides: its side, or buy and sell for a swap
// that is both; nothing for a reduce-only order, which only shrinks a position.
func sidesOf(t *Trade) []string {
	switch {
	case t.Kind == TradeOrder && t.ReduceOnly:
		return nil
	case t.Side != "":
		return []string{t.Side}
	case t.Kind == TradeSwap:
		return []string{SideBuy, SideSell}
	}
	return nil
}

func (ev *evaluation) side() result {
	ts := ev.trades(TradeSwap, TradeOrder)
	if len(ts) == 0 {
		return notChecked(kindReason(ev.act.Kind, kNoSide))
	}
	d := ev.in.Policy.Doc
	if d.Trading == nil || d.Trading.Sides == nil {
		return notChecked("trading.sides is not configured")
	}
	allowed := d.Trading.Sides
	obs := make([]string, 0, len(ts))
	for _, a := range ts {
		s := a.Trade.Side
		if s == "" && a.Trade.Kind == TradeSwap {
			s = "buy+sell"
		}
		if a.Trade.ReduceOnly {
			s += " (reduce-only)"
		}
		obs = append(obs, s)
	}
	for _, a := range ts {
		for _, s := range sidesOf(a.Trade) {
			if !slices.Contains(allowed, s) {
				return failed(verdict.ReasonSideNotAllowed, "side "+s+" of this "+a.Kind+" is not in trading.sides", policy.FieldSides, obs, allowed).
					suggest(useOneOf(policy.FieldSides, allowed))
			}
		}
	}
	return passed("every side is in trading.sides", policy.FieldSides, obs, allowed)
}

// slippage is slippage_guard over every swap (docs/policy.md#trades).
func (ev *evaluation) slippage() result {
	swaps := ev.trades(TradeSwap)
	if len(swaps) == 0 {
		return notChecked(kindReason(ev.act.Kind, kNoSwap))
	}
	d := ev.in.Policy.Doc
	var require bool
	var maxBps *int
	if d.Swaps != nil {
		require = d.Swaps.RequireMinOut != nil && *d.Swaps.RequireMinOut
		maxBps = d.Swaps.MaxSlippageBps
	}
	if !require && maxBps == nil {
		return notChecked("swaps.requireMinOut and swaps.maxSlippageBps are not configured")
	}
	exp := &slippageExpected{MaxSlippageBps: maxBps, RequireMinOut: require}
	obs := make([]any, len(swaps))
	var first *result
	for i, a := range swaps {
		t := a.Trade
		guarded := unguarded(t) == ""
		bps, note := ev.slippageBps(t)
		var slip any
		if bps != nil {
			f := ratFloat64(bps)
			slip = f
		}
		if t.ExactOut {
			obs[i] = &swapOutObserved{AmountOut: decimal(t.AmountOut), AssetIn: ev.hex(t.AssetIn), AssetOut: ev.hex(t.AssetOut), ExactOut: true,
				Kind: a.Kind, MaxIn: decimal(t.MaxIn), Note: note, SlippageBps: slip}
		} else {
			obs[i] = &swapInObserved{AmountIn: decimal(t.AmountIn), AssetIn: ev.hex(t.AssetIn), AssetOut: ev.hex(t.AssetOut),
				Kind: a.Kind, MinOut: decimal(t.MinOut), Note: note, SlippageBps: slip}
		}
		if first != nil {
			continue
		}
		switch {
		case require && !guarded:
			r := failed(verdict.ReasonNoSlippageGuard, "this "+a.Kind+" "+unguarded(t), policy.FieldRequireMinOut, nil, nil).suggest(guardSwap(t))
			first = &r
		case maxBps != nil && bps == nil:
			// a configured bound that cannot be measured is not met (docs/policy.md#trades)
			r := failed(verdict.ReasonDataUnavailable, "the slippage of this "+a.Kind+" cannot be measured against swaps.maxSlippageBps: "+note, policy.FieldMaxSlippage, nil, nil)
			first = &r
		case maxBps != nil && bps != nil && ratCmpInt(bps, int64(*maxBps)) > 0:
			r := failed(verdict.ReasonNoSlippageGuard, "this "+a.Kind+" allows "+bps.FloatString(2)+" bps of slippage, more than swaps.maxSlippageBps "+strconv.Itoa(*maxBps), policy.FieldMaxSlippage, nil, nil).
				suggest(ev.boundSlippage(t, *maxBps))
			first = &r
		}
	}
	if first != nil {
		first.obs, first.exp = obs, exp
		return *first
	}
	field := policy.FieldRequireMinOut
	if maxBps != nil {
		field = policy.FieldMaxSlippage
	}
	return passed("every swap is guarded within the policy", field, obs, exp)
}

// The observations and expectations of slippage_guard and execution_price_bound. Their
// members are in the order encoding/json writes a map's keys, so each encodes exactly as the
// map {member: value} would, in one allocation instead of a map's.
type (
	slippageExpected struct {
		MaxSlippageBps *int `json:"maxSlippageBps"`
		RequireMinOut  bool `json:"requireMinOut"`
	}
	// swapInObserved is an exact-input swap's.
	swapInObserved struct {
		AmountIn    any    `json:"amountIn"`
		AssetIn     string `json:"assetIn"`
		AssetOut    string `json:"assetOut"`
		ExactOut    bool   `json:"exactOut"`
		Kind        string `json:"kind"`
		MinOut      any    `json:"minOut"`
		Note        string `json:"note,omitempty"`
		SlippageBps any    `json:"slippageBps"`
	}
	// swapOutObserved is an exact-output swap's.
	swapOutObserved struct {
		AmountOut   any    `json:"amountOut"`
		AssetIn     string `json:"assetIn"`
		AssetOut    string `json:"assetOut"`
		ExactOut    bool   `json:"exactOut"`
		Kind        string `json:"kind"`
		MaxIn       any    `json:"maxIn"`
		Note        string `json:"note,omitempty"`
		SlippageBps any    `json:"slippageBps"`
	}
	orderExpected struct {
		MaxPriceDeviationBps *int `json:"maxPriceDeviationBps"`
		RequireLimitPrice    bool `json:"requireLimitPrice"`
	}
	orderObserved struct {
		DeviationBps any    `json:"deviationBps"`
		Kind         string `json:"kind"`
		LimitPrice   any    `json:"limitPrice"`
		Market       string `json:"market"`
		Note         string `json:"note,omitempty"`
		Reference    any    `json:"reference"`
		Side         string `json:"side"`
	}
)

// unguarded says why a swap has no slippage guard, or "" when it has one.
func unguarded(t *Trade) string {
	if t.ExactOut {
		if t.MaxIn == nil || t.MaxIn.Cmp(actions.MaxUint256) >= 0 {
			return "has no maximum input"
		}
		return ""
	}
	if t.MinOut == nil || t.MinOut.Sign() == 0 {
		return "has a minimum output of zero"
	}
	return ""
}

// slippageBps is the slippage a swap allows against the price table's reference, in basis
// points: (value in − worst value out) / value in for exact input, (worst value in − value
// out) / value out for exact output. A swap without a guard allows 10000 bps (all of it),
// whatever the price; nil with a note when the reference is missing.
func (ev *evaluation) slippageBps(t *Trade) (*big.Rat, string) {
	if !t.ExactOut && (t.MinOut == nil || t.MinOut.Sign() == 0) {
		return big.NewRat(10000, 1), ""
	}
	if t.ExactOut && (t.MaxIn == nil || t.MaxIn.Cmp(actions.MaxUint256) >= 0) {
		return big.NewRat(10000, 1), ""
	}
	pay, get := t.AmountIn, t.MinOut
	if t.ExactOut {
		pay, get = t.MaxIn, t.AmountOut
	}
	if pay == nil || get == nil {
		return nil, "no reference price: the amount is only known at execution"
	}
	in, okIn := ev.usdOf(ev.act.ChainID, t.AssetIn, pay)
	out, okOut := ev.usdOf(ev.act.ChainID, t.AssetOut, get)
	if !okIn || !okOut {
		return nil, "no reference price for the pair in the price table or its feeds"
	}
	base := in
	if t.ExactOut {
		base = out
	}
	if base.Sign() == 0 {
		return nil, "no reference price: the price table values the amount at zero"
	}
	bps := relativeBps(in, out, base)
	if bps.Sign() < 0 {
		return new(big.Rat), ""
	}
	return bps, ""
}

// relativeBps is (x − y) / base × 10000, exactly, for base x or y (> 0), as one fraction
// reduced once: with x = a/b and y = c/d, (ad − cb) × 10000 / (ad) when base is x and
// (ad − cb) × 10000 / (bc) when base is y.
func relativeBps(x, y, base *big.Rat) *big.Rat {
	a, b, c, d := x.Num(), x.Denom(), y.Num(), y.Denom()
	num := new(big.Int).Mul(a, d)
	num.Sub(num, new(big.Int).Mul(c, b))
	num.Mul(num, bigTenThousand)
	var den *big.Int
	if base == x {
		den = new(big.Int).Mul(a, d)
	} else {
		den = new(big.Int).Mul(b, c)
	}
	return new(big.Rat).SetFrac(num, den)
}

// bigTenThousand is 10000, read only.
var bigTenThousand = big.NewInt(10000)

// priceBound is execution_price_bound over every order, and over every swap when
// swaps.requirePriceLimit is set (docs/policy.md#trades).
func (ev *evaluation) priceBound() result {
	orders := ev.trades(TradeOrder)
	d := ev.in.Policy.Doc
	if d.Swaps != nil && d.Swaps.RequirePriceLimit != nil && *d.Swaps.RequirePriceLimit {
		if swaps := ev.trades(TradeSwap); len(swaps) > 0 {
			if r := swapPriceLimits(swaps); r.status == verdict.CheckFailed || len(orders) == 0 {
				return r
			}
		}
	}
	if len(orders) == 0 {
		if len(ev.trades(TradeSwap)) > 0 {
			return notChecked("a swap's price bound is its minimum output or maximum input: see slippage_guard")
		}
		return notChecked(kindReason(ev.act.Kind, kNoOrder))
	}
	var require bool
	var maxBps *int
	if d.Orders != nil {
		require = d.Orders.RequireLimitPrice != nil && *d.Orders.RequireLimitPrice
		maxBps = d.Orders.MaxPriceDeviationBps
	}
	if !require && maxBps == nil {
		return notChecked("orders.requireLimitPrice and orders.maxPriceDeviationBps are not configured")
	}
	exp := &orderExpected{MaxPriceDeviationBps: maxBps, RequireLimitPrice: require}
	obs := make([]orderObserved, len(orders))
	var first *result
	for i, a := range orders {
		t := a.Trade
		o := &obs[i]
		*o = orderObserved{Kind: a.Kind, Market: t.Market, Side: t.Side, LimitPrice: ev.ratString(t.LimitPrice)}
		limited := t.LimitPrice != nil && t.LimitPrice.Sign() > 0
		var dev, ref *big.Rat
		if limited {
			var ok bool
			if ref, ok = ev.reference(a); ok {
				o.Reference = ev.ratString(ref)
				dev = relativeBps(t.LimitPrice, ref, ref)
				dev.Abs(dev)
				f := ratFloat64(dev)
				o.DeviationBps = f
			} else {
				o.Note = "no reference price for " + t.Market
			}
		}
		if first != nil {
			continue
		}
		switch {
		case !limited && require:
			r := failed(verdict.ReasonNoExecutionPriceBound, "this "+a.Kind+" has no limit price", policy.FieldRequireLimit, nil, nil).suggest("set a limit price")
			first = &r
		case !limited && maxBps != nil:
			r := failed(verdict.ReasonNoExecutionPriceBound, "this "+a.Kind+" has no limit price to bound", policy.FieldMaxDeviation, nil, nil).suggest("set a limit price")
			first = &r
		case dev == nil && maxBps != nil:
			// a configured bound that cannot be measured is not met (docs/policy.md#trades)
			r := failed(verdict.ReasonDataUnavailable, "the limit price of this "+a.Kind+" cannot be measured against orders.maxPriceDeviationBps: no reference price for "+t.Market, policy.FieldMaxDeviation, nil, nil)
			first = &r
		case dev != nil && maxBps != nil && ratCmpInt(dev, int64(*maxBps)) > 0:
			r := failed(verdict.ReasonNoExecutionPriceBound, "the limit price of this "+a.Kind+" is "+dev.FloatString(2)+" bps from the reference price, more than orders.maxPriceDeviationBps "+strconv.Itoa(*maxBps), policy.FieldMaxDeviation, nil, nil).
				suggest(boundLimitPrice(ref, *maxBps))
			first = &r
		}
	}
	if first != nil {
		first.obs, first.exp = obs, exp
		return *first
	}
	field := policy.FieldRequireLimit
	if maxBps != nil {
		field = policy.FieldMaxDeviation
	}
	return passed("every order has a limit price within the policy", field, obs, exp)
}

// swapLimitObserved is a swap's observation under swaps.requirePriceLimit (members in
// encoding/json's map order, as the others).
type swapLimitObserved struct {
	Kind         string `json:"kind"`
	MinOut       bool   `json:"minOut"`
	PriceLimited bool   `json:"priceLimited"`
}

// swapPriceLimits is execution_price_bound under swaps.requirePriceLimit: every swap carries
// its own price limit and a minimum output (or a bounded maximum input).
func swapPriceLimits(swaps []*Action) result {
	obs := make([]swapLimitObserved, len(swaps))
	var first *result
	for i, a := range swaps {
		t := a.Trade
		why := unguarded(t)
		obs[i] = swapLimitObserved{Kind: a.Kind, MinOut: why == "", PriceLimited: t.PriceLimited}
		switch {
		case first != nil:
		case !t.PriceLimited:
			r := failed(verdict.ReasonNoExecutionPriceBound, "this "+a.Kind+" carries no price limit of its own", policy.FieldRequireSwapLimit, nil, nil).
				suggest("set a price limit on every hop (sqrtPriceLimitX96, or minHopPriceX36 through the Universal Router 2.1.1)")
			first = &r
		case why != "":
			r := failed(verdict.ReasonNoExecutionPriceBound, "this "+a.Kind+" "+why+": a price limit does not stand in for it", policy.FieldRequireSwapLimit, nil, nil).suggest(guardSwap(t))
			first = &r
		}
	}
	exp := map[string]any{"requirePriceLimit": true}
	if first != nil {
		first.obs, first.exp = obs, exp
		return *first
	}
	return passed("every swap carries its own price limit and a minimum output", policy.FieldRequireSwapLimit, obs, exp)
}

// reference is the reference price of an order's market, recorded as a source.
func (ev *evaluation) reference(a *Action) (*big.Rat, bool) {
	return ev.marketReference(a.Protocol, a.ChainID, a.Trade.Market)
}

// marketReference is the reference price of a market, recorded as a source.
func (ev *evaluation) marketReference(protocol string, chainID int64, market string) (*big.Rat, bool) {
	if ev.refs == nil || market == "" {
		return nil, false
	}
	r, ok := ev.refs.ReferencePrice(protocol, chainID, market)
	if !ok || r.Price == nil || r.Price.Sign() <= 0 {
		return nil, false
	}
	name := r.Source
	if name == "" {
		name = protocol + ".reference"
	}
	ev.source(name, r.AsOf, !r.Cached)
	return r.Price, true
}

func (ev *evaluation) leverage() result {
	var ls []*Action
	ev.act.Walk(func(a *Action) {
		if a.Trade != nil && a.Trade.Leverage != nil {
			ls = append(ls, a)
		}
	})
	if len(ls) == 0 {
		return notChecked(kindReason(ev.act.Kind, kNoLeverage))
	}
	d := ev.in.Policy.Doc
	if d.Perps == nil || d.Perps.MaxLeverage == nil {
		return notChecked("perps.maxLeverage is not configured")
	}
	limit := *d.Perps.MaxLeverage
	c := bound(limit)
	capRat := c.rat
	obs := make([]float64, len(ls))
	for i, a := range ls {
		obs[i] = ratFloat64(a.Trade.Leverage)
	}
	for i, a := range ls {
		if a.Trade.Leverage.Cmp(capRat) > 0 {
			return failed(verdict.ReasonLeverageCapExceeded, "leverage "+strconv.FormatFloat(obs[i], 'f', -1, 64)+"x of this "+a.Kind+" exceeds perps.maxLeverage "+c.text+"x", policy.FieldMaxLeverage, obs, c.f).
				suggest("lower the leverage to <= " + c.text + "x")
		}
	}
	return passed("every leverage is within perps.maxLeverage", policy.FieldMaxLeverage, obs, c.f)
}

// Reference is a market's reference price: what execution_price_bound measures an order's
// limit price against.
type Reference struct {
	// Price is the USD price of one unit of the market, > 0.
	Price *big.Rat
	// Source names where it came from, for evidence.sources ("hyperliquid.mark").
	Source string
	// AsOf is when it was observed.
	AsOf time.Time
	// Cached is set when the price is older than its source's freshness bound.
	Cached bool
}

// ReferencePrices gives the reference price of a Trade.Market (a Hyperliquid coin's mark
// price). It must not block for long: it is called on the evaluation path.
type ReferencePrices interface {
	ReferencePrice(protocol string, chainID int64, market string) (Reference, bool)
}
