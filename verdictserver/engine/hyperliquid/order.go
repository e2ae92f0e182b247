package hyperliquid

import (
	"math/big"
	"strconv"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
)

// triggerSlippage is the slippage a market trigger order (isMarket) may take past its
// trigger price: 10%, the venue's tolerance for market TP/SL orders.
var triggerSlippage = big.NewRat(1, 10)

// order reads an order action {type, orders, grouping, builder?}: each order a leg
// (docs/policy.md#hyperliquid-actions).
func (d Decoder) order(action, tx map[string]any, s *actions.Scratch) (*actions.Action, *actions.DecodeError) {
	if de := exactly(action, "action", "type", "orders", "grouping", "builder"); de != nil {
		return nil, de
	}
	grouping, _ := action["grouping"].(string)
	if grouping != "na" && grouping != "normalTpsl" && grouping != "positionTpsl" {
		return nil, actions.Fail("action.grouping", `must be "na", "normalTpsl" or "positionTpsl"`)
	}
	orders, ok := action["orders"].([]any)
	if !ok || len(orders) == 0 || len(orders) > maxOrders {
		return nil, actions.Fail("action.orders", "must be an array of 1 to 64 orders")
	}
	var leverage *big.Rat
	if v, present := tx["leverage"]; present {
		n, ok := actions.Int(v, 1, maxLeverage)
		if !ok {
			return nil, actions.Fail("leverage", "must be an integer from 1 to 10000")
		}
		leverage = new(big.Rat).SetInt64(n)
	}
	act := scratchAction(s, KindOrder)
	act.Fields["grouping"] = grouping
	if raw, present := action["builder"]; present {
		b, ok := raw.(map[string]any)
		if !ok {
			return nil, actions.Fail("action.builder", "must be an object {b, f}")
		}
		if de := exactly(b, "action.builder", "b", "f"); de != nil {
			return nil, de
		}
		addr, de := actions.AddressMember(b, "b")
		if de != nil {
			return nil, actions.Fail("action.builder.b", de.Problem)
		}
		f, ok := actions.Int(b["f"], 0, 1000)
		if !ok {
			return nil, actions.Fail("action.builder.f", "must be an integer fee in tenths of a basis point, 0 to 1000")
		}
		act.Screen = append(act.Screen, addr)
		act.Fields["builder"] = map[string]any{"b": addr.Hex(), "f": f}
	}
	perps := 0
	for i, raw := range orders {
		path := "action.orders." + strconv.Itoa(i)
		o, ok := raw.(map[string]any)
		if !ok {
			return nil, actions.Fail(path, "must be an object {a, b, p, s, r, t, c?}")
		}
		leg, de := d.orderLeg(o, path, grouping, s)
		if de != nil {
			return nil, de
		}
		if leg.Fields["market"] == "perp" {
			perps++
			if leverage != nil {
				leg.Trade.Leverage = leverage
			}
		}
		act.Legs = append(act.Legs, leg)
	}
	if leverage != nil && perps == 0 {
		return nil, actions.Fail("leverage", "applies to perp orders, and this action has none")
	}
	return act, nil
}

func (d Decoder) orderLeg(o map[string]any, path, grouping string, s *actions.Scratch) (*actions.Action, *actions.DecodeError) {
	if de := exactly(o, path, "a", "b", "p", "s", "r", "t", "c"); de != nil {
		return nil, de
	}
	asset, ok := actions.Int(o["a"], 0, 1<<31)
	if !ok {
		return nil, actions.Fail(path+".a", "must be an asset index, a non-negative integer")
	}
	coin, spot, de := d.coin(asset, path+".a")
	if de != nil {
		return nil, de
	}
	isBuy, ok := o["b"].(bool)
	if !ok {
		return nil, actions.Fail(path+".b", "must be a boolean (true: buy or long)")
	}
	reduce, ok := o["r"].(bool)
	if !ok {
		return nil, actions.Fail(path+".r", "must be a boolean (reduce-only)")
	}
	if spot && reduce {
		return nil, actions.Fail(path+".r", "reduce-only applies to perp orders, not to spot")
	}
	pStr, _ := o["p"].(string)
	price, ok := decimal(pStr)
	if !ok {
		return nil, actions.Fail(path+".p", `must be a decimal string ("50000.0"), the limit price`)
	}
	sStr, _ := o["s"].(string)
	size, ok := decimal(sStr)
	if !ok {
		return nil, actions.Fail(path+".s", `must be a decimal string ("0.01"), the size`)
	}
	ot, ok := o["t"].(map[string]any)
	if !ok || len(ot) != 1 {
		return nil, actions.Fail(path+".t", `must be {"limit": {"tif": …}} or {"trigger": {"isMarket", "triggerPx", "tpsl"}}`)
	}
	leg := scratchAction(s, KindOrder)
	fields := leg.Fields
	fields["asset"], fields["coin"], fields["market"], fields["p"], fields["s"] = asset, coin, "perp", pStr, sStr
	if spot {
		fields["market"] = "spot"
	}
	side := actions.SideLong
	switch {
	case spot && isBuy:
		side = actions.SideBuy
	case spot:
		side = actions.SideSell
	case !isBuy:
		side = actions.SideShort
	}
	limit := price
	trigger := false
	if lim, present := ot["limit"]; present {
		l, ok := lim.(map[string]any)
		if !ok || exactly(l, path+".t.limit", "tif") != nil {
			return nil, actions.Fail(path+".t.limit", `must be {"tif": "Gtc" | "Ioc" | "Alo"}`)
		}
		tif, _ := l["tif"].(string)
		if tif != "Gtc" && tif != "Ioc" && tif != "Alo" {
			return nil, actions.Fail(path+".t.limit.tif", `must be "Gtc", "Ioc" or "Alo"`)
		}
		fields["tif"] = tif
	} else if trg, present := ot["trigger"]; present {
		trigger = true
		tr, ok := trg.(map[string]any)
		if !ok {
			return nil, actions.Fail(path+".t.trigger", `must be {"isMarket", "triggerPx", "tpsl"}`)
		}
		if de := exactly(tr, path+".t.trigger", "isMarket", "triggerPx", "tpsl"); de != nil {
			return nil, de
		}
		isMarket, ok := tr["isMarket"].(bool)
		if !ok {
			return nil, actions.Fail(path+".t.trigger.isMarket", "must be a boolean")
		}
		pxStr, _ := tr["triggerPx"].(string)
		px, ok := decimal(pxStr)
		if !ok || px.Sign() == 0 {
			return nil, actions.Fail(path+".t.trigger.triggerPx", "must be a decimal string > 0")
		}
		tpsl, _ := tr["tpsl"].(string)
		if tpsl != "tp" && tpsl != "sl" {
			return nil, actions.Fail(path+".t.trigger.tpsl", `must be "tp" or "sl"`)
		}
		fields["trigger"] = map[string]any{"isMarket": isMarket, "triggerPx": pxStr, "tpsl": tpsl}
		if isMarket {
			limit = marketTriggerBound(isBuy, price, px)
		}
	} else {
		return nil, actions.Fail(path+".t", `must be {"limit": …} or {"trigger": …}`)
	}
	if size.Sign() == 0 && !(trigger && reduce && grouping == "positionTpsl") {
		return nil, actions.Fail(path+".s", "must be > 0 (size 0 is only a positionTpsl trigger that closes the whole position)")
	}
	if c, present := o["c"]; present {
		s, ok := c.(string)
		if !ok || !isHex(s, 32) {
			return nil, actions.Fail(path+".c", "must be a client order id, 0x and 32 hex digits")
		}
		fields["cloid"] = s
	}
	if limit.Sign() == 0 {
		limit = nil // p "0": no price bound
	}
	leg.Coins = []string{coin}
	leg.Trade = s.Trade()
	*leg.Trade = actions.Trade{Kind: actions.TradeOrder, Side: side, Market: coin, LimitPrice: limit, Size: size, ReduceOnly: reduce}
	return leg, nil
}

// marketTriggerBound is the worst price a market trigger order can fill at: the venue fills
// it within triggerSlippage of its trigger, and p may bound it further; the worse of the two
// counts (the higher for a buy, the lower for a sell; p 0 is no bound).
func marketTriggerBound(isBuy bool, p, trigger *big.Rat) *big.Rat {
	adj := new(big.Rat).Set(trigger)
	if isBuy {
		adj.Mul(adj, new(big.Rat).Add(big.NewRat(1, 1), triggerSlippage))
		if p.Cmp(adj) > 0 {
			return p
		}
		return adj
	}
	adj.Mul(adj, new(big.Rat).Sub(big.NewRat(1, 1), triggerSlippage))
	if p.Sign() > 0 && p.Cmp(adj) < 0 {
		return p
	}
	return adj
}

func (d Decoder) updateLeverage(action map[string]any) (*actions.Action, *actions.DecodeError) {
	if de := exactly(action, "action", "type", "asset", "isCross", "leverage"); de != nil {
		return nil, de
	}
	asset, ok := actions.Int(action["asset"], 0, spotBase-1)
	if !ok {
		return nil, actions.Fail("action.asset", "must be a perp asset index (0 to 9999): spot has no leverage")
	}
	coin, _, de := d.coin(asset, "action.asset")
	if de != nil {
		return nil, de
	}
	cross, ok := action["isCross"].(bool)
	if !ok {
		return nil, actions.Fail("action.isCross", "must be a boolean")
	}
	lev, ok := actions.Int(action["leverage"], 1, maxLeverage)
	if !ok {
		return nil, actions.Fail("action.leverage", "must be an integer from 1 to 10000")
	}
	act := newAction(KindUpdateLeverage)
	act.Fields = map[string]any{"asset": asset, "coin": coin, "isCross": cross, "leverage": lev}
	act.Coins = []string{coin}
	act.Trade = &actions.Trade{Kind: actions.TradeLeverage, Market: coin, Leverage: new(big.Rat).SetInt64(lev)}
	return act, nil
}

// cancel reads cancel {cancels: [{a, o}]} and cancelByCloid {cancels: [{asset, cloid}]}: no
// trade, no coin for assets.hyperliquid, nothing moved.
func (d Decoder) cancel(typ string, action map[string]any) (*actions.Action, *actions.DecodeError) {
	if de := exactly(action, "action", "type", "cancels"); de != nil {
		return nil, de
	}
	list, ok := action["cancels"].([]any)
	if !ok || len(list) == 0 || len(list) > maxCancels {
		return nil, actions.Fail("action.cancels", "must be an array of 1 to 256 cancels")
	}
	assetKey, idKey, kind := "a", "o", KindCancel
	if typ == "cancelByCloid" {
		assetKey, idKey, kind = "asset", "cloid", KindCancelByCloid
	}
	out := make([]map[string]any, len(list))
	for i, raw := range list {
		path := "action.cancels." + strconv.Itoa(i)
		c, ok := raw.(map[string]any)
		if !ok {
			return nil, actions.Fail(path, "must be an object {"+assetKey+", "+idKey+"}")
		}
		if de := exactly(c, path, assetKey, idKey); de != nil {
			return nil, de
		}
		asset, ok := actions.Int(c[assetKey], 0, 1<<31)
		if !ok {
			return nil, actions.Fail(path+"."+assetKey, "must be an asset index, a non-negative integer")
		}
		coin, _, de := d.coin(asset, path+"."+assetKey)
		if de != nil {
			return nil, de
		}
		entry := map[string]any{"asset": asset, "coin": coin}
		if typ == "cancelByCloid" {
			s, ok := c["cloid"].(string)
			if !ok || !isHex(s, 32) {
				return nil, actions.Fail(path+".cloid", "must be a client order id, 0x and 32 hex digits")
			}
			entry["cloid"] = s
		} else {
			oid, ok := actions.Int(c["o"], 0, 1<<62)
			if !ok {
				return nil, actions.Fail(path+".o", "must be an order id, a non-negative integer")
			}
			entry["o"] = oid
		}
		out[i] = entry
	}
	act := newAction(kind)
	act.Fields = map[string]any{"cancels": out}
	return act, nil
}
