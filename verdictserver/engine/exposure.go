package engine

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/hyperliquid"
)

// The pricing table (docs/policy.md#pricing): the one place that says what an action exposes
// and at what USD price. per_tx_cap and usdNotional both read it, and every decoder only
// records what an action does (its Notional, Trade, CoinAmounts and Allowances); it never
// decides what counts.
//
//	Notional          each amount at the table's (or its feed's) price of the token
//	Trade, a swap     its input (amountIn, or maxIn for exact output) of assetIn, when Notional is nil
//	Trade, an order   size × limit price for a buy or long; size × the higher of the limit and
//	                  the reference price for a sell or short (its limit is only a floor on the
//	                  fill); size × reference without a limit; no reference where one is
//	                  needed: unpriced
//	CoinAmounts       USDC at 1 USD, another Hyperliquid coin at its reference price
//	Allowances        every allowance at its amount, "unlimited" or not
//
// An amount without a price leaves the action unpriced: a capped policy gives data_unavailable.

// exposes reports whether act exposes anything the table prices.
func exposes(a *Action) bool {
	return len(a.Notional) > 0 || len(a.CoinAmounts) > 0 || len(a.Allowances) > 0 ||
		(a.Notional == nil && a.Trade != nil && a.Trade.Kind != TradeLeverage)
}

// exposureUSD adds to add what a alone (not its legs) exposes, in USD; false and the name of
// what has no price when something is unpriced.
func (ev *evaluation) exposureUSD(a *Action, add func(*big.Rat)) (string, bool) {
	for _, c := range a.CoinAmounts {
		v, ok := ev.coinUSD(a, c)
		if !ok {
			return c.Coin, false
		}
		add(v)
	}
	amounts := a.Notional
	if amounts == nil && a.Trade != nil {
		if a.Trade.Kind == TradeOrder {
			v, ok := ev.orderUSD(a)
			if !ok {
				return "the order on " + a.Trade.Market, false
			}
			add(v)
		}
		amounts = TradeNotional(a.Trade)
	}
	for _, x := range amounts {
		if u, ok := ev.amountUSD(a.ChainID, x.Asset, x.Value, add); !ok {
			return u, false
		}
	}
	for _, ap := range a.Allowances {
		if u, ok := ev.amountUSD(a.ChainID, ap.Asset, ap.Amount, add); !ok {
			return u, false
		}
	}
	return "", true
}

// amountUSD adds value of asset in USD to add; false and the asset when it has no price.
func (ev *evaluation) amountUSD(chainID int64, asset common.Address, value *big.Int, add func(*big.Rat)) (string, bool) {
	v, ok := ev.usdOf(chainID, asset, value)
	if !ok {
		return ev.hex(asset), false
	}
	add(v)
	return "", true
}

// TradeNotional is what a swap moves when its action carries no Notional: its input
// (AmountIn, or MaxIn for exact output) of AssetIn; nothing for an order, which the pricing
// table prices in USD (orderUSD).
func TradeNotional(t *Trade) []Amount {
	if t == nil || t.Kind != TradeSwap {
		return nil
	}
	v := t.AmountIn
	if t.ExactOut {
		v = t.MaxIn
	}
	return []Amount{{Asset: t.AssetIn, Value: v}}
}

// orderUSD is an order's notional in USD: Size × LimitPrice for a buy or a long; for a sell
// or a short, whose limit is only a floor on its fill, Size × the higher of LimitPrice and
// the reference price; Size × the reference price when the order has no limit price.
func (ev *evaluation) orderUSD(a *Action) (*big.Rat, bool) {
	t := a.Trade
	if t.Size == nil {
		return nil, false
	}
	limited := t.LimitPrice != nil && t.LimitPrice.Sign() > 0
	p := t.LimitPrice
	if !limited || t.Side == SideSell || t.Side == SideShort {
		ref, ok := ev.reference(a)
		if !ok {
			return nil, false
		}
		if !limited || ref.Cmp(p) > 0 {
			p = ref
		}
	}
	if limited {
		// docs/policy.md#pricing: the order prices itself; a source like the others.
		ev.source("order", ev.now, true)
	}
	return new(big.Rat).Mul(t.Size, p), true
}

// recipientsOf is where act sends value: its recipients and the spender of every allowance
// it grants (docs/policy.md#pricing).
func recipientsOf(a *Action) []common.Address {
	if len(a.Allowances) == 0 {
		return a.Recipients
	}
	out := a.Recipients
	for _, ap := range a.Allowances {
		out = actions.AppendNew(out[:len(out):len(out)], ap.Spender)
	}
	return out
}

// coinUSD prices a quantity of a Hyperliquid coin: USDC at 1 USD, any other coin at the
// reference price of the market of its name.
func (ev *evaluation) coinUSD(a *Action, c CoinAmount) (*big.Rat, bool) {
	if c.Amount == nil {
		return nil, false
	}
	if c.Coin == hyperliquid.CoinUSDC {
		return new(big.Rat).Set(c.Amount), true
	}
	p, ok := ev.marketReference(a.Protocol, a.ChainID, c.Coin)
	if !ok {
		return nil, false
	}
	return new(big.Rat).Mul(c.Amount, p), true
}
