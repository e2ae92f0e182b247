package engine

import (
	"encoding/json"
	"math/big"
	"slices"
	"strconv"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/policy"
)

// ProtocolHyperliquid is the proposedTx.protocol of a Hyperliquid exchange action
// (docs/policy.md#hyperliquid-actions).
const ProtocolHyperliquid = "hyperliquid"

// HyperliquidChainID is the proposedTx.chainId of every Hyperliquid action: 1337, the
// chainId of the EIP-712 domain Hyperliquid's L1 actions are signed in. Hyperliquid is not
// an EVM chain; user-signed actions (usdSend, withdraw3, spotSend) run on the same L1 and
// take the same id, whatever signatureChainId the wallet signs with.
const HyperliquidChainID = 1337

// The kinds of a decoded Hyperliquid action: "hyperliquid." and the action's type. An
// order action's orders are legs of kind KindHyperliquidOrder too.
const (
	KindHyperliquidOrder          = "hyperliquid.order"
	KindHyperliquidUpdateLeverage = "hyperliquid.updateLeverage"
	KindHyperliquidCancel         = "hyperliquid.cancel"
	KindHyperliquidCancelByCloid  = "hyperliquid.cancelByCloid"
	KindHyperliquidUsdSend        = "hyperliquid.usdSend"
	KindHyperliquidWithdraw       = "hyperliquid.withdraw3"
	KindHyperliquidSpotSend       = "hyperliquid.spotSend"
)

// CoinUSDC is Hyperliquid's USDC: the perps' margin and quote, counted at 1 USD.
const CoinUSDC = "USDC"

// DefaultHyperliquidPerps is the perp coin table the built-in decoder uses: asset index in
// mainnet's meta.universe → coin. Only long-listed coins whose index is settled are in it
// (index 3, once MATIC, is left out: its name may have changed with the POL migration);
// an index it lacks is a decode failure. Testnet indexes differ: an operator on testnet,
// or one who trades other coins, registers HyperliquidDecoder{Perps: …} built from the
// info endpoint's meta (docs/policy.md#hyperliquid-actions).
var DefaultHyperliquidPerps = map[int64]string{
	0: "BTC", 1: "ETH", 2: "ATOM", 4: "DYDX", 5: "SOL", 6: "AVAX", 7: "BNB",
	8: "APE", 11: "ARB", 12: "DOGE", 13: "INJ", 14: "SUI", 18: "LINK",
}

// Bounds on what one action may carry, so that decoding stays cheap.
const (
	maxHyperliquidOrders   = 64
	maxHyperliquidCancels  = 256
	maxHyperliquidDecimal  = 40     // characters of a decimal string ("50000.0")
	maxHyperliquidLeverage = 10_000 // an integer leverage above it is not a leverage
	hyperliquidSpotBase    = 10_000 // spot asset = 10000 + index in spotMeta.universe
	hyperliquidBuilderBase = 100_000
)

// triggerSlippage is the slippage a market trigger order (isMarket) may take past its
// trigger price: 10%, the venue's tolerance for market TP/SL orders.
var triggerSlippage = big.NewRat(1, 10)

// HyperliquidDecoder reads Hyperliquid exchange actions (docs/policy.md#hyperliquid-actions):
// orders, updateLeverage, cancel, cancelByCloid, usdSend, withdraw3 and spotSend. Any other
// action type, member or value is a decode failure. It never calls the network.
type HyperliquidDecoder struct {
	// Perps maps a perp asset index to its coin name; nil is DefaultHyperliquidPerps.
	Perps map[int64]string
}

// Protocol is "hyperliquid".
func (HyperliquidDecoder) Protocol() string { return ProtocolHyperliquid }

var hyperliquidMembers = map[string]bool{
	"protocol": true, "chainId": true, "action": true, "nonce": true, "vaultAddress": true,
	"expiresAfter": true, "leverage": true,
}

// Decode reads proposedTx = {protocol, chainId: 1337, action: {type, …}, nonce?,
// vaultAddress?, expiresAfter?, leverage?}.
func (d HyperliquidDecoder) Decode(tx map[string]any) (*Action, error) {
	return d.decodeInto(tx, common.Address{}, nil)
}

// decodeInto is Decode with memory for the actions (actionScratch); a Hyperliquid action
// does not depend on its sender.
func (d HyperliquidDecoder) decodeInto(tx map[string]any, _ common.Address, s *actionScratch) (*Action, error) {
	for k := range tx {
		if !hyperliquidMembers[k] {
			return nil, fail(k, "is not a member of a Hyperliquid action")
		}
	}
	chainID, ok := chainIDOf(tx["chainId"])
	if !ok || chainID != HyperliquidChainID {
		return nil, fail("chainId", "must be 1337, the chain id of Hyperliquid actions")
	}
	// The members of the request itself, added to the action's fields at the end (where the
	// action's own member of the same name, if any, wins).
	var top [4]struct {
		k string
		v any
	}
	nTop := 0
	field := func(k string, v any) { top[nTop].k, top[nTop].v = k, v; nTop++ }
	if v, present := tx["nonce"]; present {
		n, ok := intOf(v, 1, 1<<62)
		if !ok {
			return nil, fail("nonce", "must be a positive integer (milliseconds)")
		}
		field("nonce", n)
	}
	if v, present := tx["expiresAfter"]; present && v != nil {
		n, ok := intOf(v, 1, 1<<62)
		if !ok {
			return nil, fail("expiresAfter", "must be null or a positive integer (milliseconds)")
		}
		field("expiresAfter", n)
	}
	var vault *common.Address
	if v, present := tx["vaultAddress"]; present && v != nil {
		a, de := addressMember(tx, "vaultAddress")
		if de != nil {
			return nil, de
		}
		vault = &a
		field("vaultAddress", a.Hex())
	}
	action, ok := tx["action"].(map[string]any)
	if !ok {
		return nil, fail("action", "must be an object")
	}
	typ, _ := action["type"].(string)
	field("type", typ)
	var act *Action
	var de *DecodeError
	switch typ {
	case "order":
		act, de = d.order(action, tx, s)
	case "updateLeverage":
		act, de = d.updateLeverage(action)
	case "cancel", "cancelByCloid":
		act, de = d.cancel(typ, action)
	case "usdSend", "withdraw3", "spotSend":
		if vault != nil {
			return nil, fail("vaultAddress", "applies to L1 actions only, not to a "+typ)
		}
		act, de = hyperliquidSend(typ, action)
	default:
		return nil, fail("action.type", "must be one of order, updateLeverage, cancel, cancelByCloid, usdSend, withdraw3, spotSend")
	}
	if de != nil {
		return nil, de
	}
	if _, present := tx["leverage"]; present && typ != "order" {
		return nil, fail("leverage", "applies to an order action only")
	}
	if act.Fields == nil {
		act.Fields = make(map[string]any, nTop)
	}
	for _, f := range top[:nTop] {
		if _, own := act.Fields[f.k]; !own {
			act.Fields[f.k] = f.v
		}
	}
	if vault != nil {
		act.Screen = append(act.Screen, *vault)
	}
	return act, nil
}

// hyperliquidAction is an Action of this protocol on chain 1337.
func hyperliquidAction(kind string) *Action {
	return &Action{Protocol: ProtocolHyperliquid, ChainID: HyperliquidChainID, Kind: kind}
}

// hyperliquidAction is an Action of this protocol on chain 1337 with an empty Fields map,
// in s's memory (actionScratch).
func (s *actionScratch) hyperliquidAction(kind string) *Action {
	act, _ := s.action()
	act.Protocol, act.ChainID, act.Kind = ProtocolHyperliquid, HyperliquidChainID, kind
	return act
}

// exactly refuses a member of obj (at path) that members does not name.
func exactly(obj map[string]any, path string, members ...string) *DecodeError {
	for k := range obj {
		if !slices.Contains(members, k) {
			return fail(path+"."+k, "is not a member of this object")
		}
	}
	return nil
}

// coin names a Hyperliquid asset index: a perp from the table, a spot pair as "@<index>"
// ("PURR/USDC" for index 0); builder-deployed perps and outcomes are not decoded.
func (d HyperliquidDecoder) coin(asset int64, path string) (string, bool, *DecodeError) {
	switch {
	case asset < hyperliquidSpotBase:
		perps := d.Perps
		if perps == nil {
			perps = DefaultHyperliquidPerps
		}
		c, ok := perps[asset]
		if !ok || c == "" {
			return "", false, fail(path, "perp asset index "+strconv.FormatInt(asset, 10)+" is not in the decoder's coin table")
		}
		return c, false, nil
	case asset < hyperliquidBuilderBase:
		if asset == hyperliquidSpotBase {
			return "PURR/USDC", true, nil
		}
		return "@" + strconv.FormatInt(asset-hyperliquidSpotBase, 10), true, nil
	}
	return "", false, fail(path, "builder-deployed perps and outcome assets (index ≥ 100000) are not decoded")
}

func (d HyperliquidDecoder) order(action, tx map[string]any, s *actionScratch) (*Action, *DecodeError) {
	if de := exactly(action, "action", "type", "orders", "grouping", "builder"); de != nil {
		return nil, de
	}
	grouping, _ := action["grouping"].(string)
	if grouping != "na" && grouping != "normalTpsl" && grouping != "positionTpsl" {
		return nil, fail("action.grouping", `must be "na", "normalTpsl" or "positionTpsl"`)
	}
	orders, ok := action["orders"].([]any)
	if !ok || len(orders) == 0 || len(orders) > maxHyperliquidOrders {
		return nil, fail("action.orders", "must be an array of 1 to 64 orders")
	}
	var leverage *big.Rat
	if v, present := tx["leverage"]; present {
		n, ok := intOf(v, 1, maxHyperliquidLeverage)
		if !ok {
			return nil, fail("leverage", "must be an integer from 1 to 10000")
		}
		leverage = new(big.Rat).SetInt64(n)
	}
	act := s.hyperliquidAction(KindHyperliquidOrder)
	act.Fields["grouping"] = grouping
	if raw, present := action["builder"]; present {
		b, ok := raw.(map[string]any)
		if !ok {
			return nil, fail("action.builder", "must be an object {b, f}")
		}
		if de := exactly(b, "action.builder", "b", "f"); de != nil {
			return nil, de
		}
		addr, de := addressMember(b, "b")
		if de != nil {
			return nil, fail("action.builder.b", de.Problem)
		}
		f, ok := intOf(b["f"], 0, 1000)
		if !ok {
			return nil, fail("action.builder.f", "must be an integer fee in tenths of a basis point, 0 to 1000")
		}
		act.Screen = append(act.Screen, addr)
		act.Fields["builder"] = map[string]any{"b": addr.Hex(), "f": f}
	}
	perps := 0
	for i, raw := range orders {
		path := "action.orders." + strconv.Itoa(i)
		o, ok := raw.(map[string]any)
		if !ok {
			return nil, fail(path, "must be an object {a, b, p, s, r, t, c?}")
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
		return nil, fail("leverage", "applies to perp orders, and this action has none")
	}
	return act, nil
}

func (d HyperliquidDecoder) orderLeg(o map[string]any, path, grouping string, s *actionScratch) (*Action, *DecodeError) {
	if de := exactly(o, path, "a", "b", "p", "s", "r", "t", "c"); de != nil {
		return nil, de
	}
	asset, ok := intOf(o["a"], 0, 1<<31)
	if !ok {
		return nil, fail(path+".a", "must be an asset index, a non-negative integer")
	}
	coin, spot, de := d.coin(asset, path+".a")
	if de != nil {
		return nil, de
	}
	isBuy, ok := o["b"].(bool)
	if !ok {
		return nil, fail(path+".b", "must be a boolean (true: buy or long)")
	}
	reduce, ok := o["r"].(bool)
	if !ok {
		return nil, fail(path+".r", "must be a boolean (reduce-only)")
	}
	if spot && reduce {
		return nil, fail(path+".r", "reduce-only applies to perp orders, not to spot")
	}
	pStr, _ := o["p"].(string)
	price, ok := hyperliquidDecimal(pStr)
	if !ok {
		return nil, fail(path+".p", `must be a decimal string ("50000.0"), the limit price`)
	}
	sStr, _ := o["s"].(string)
	size, ok := hyperliquidDecimal(sStr)
	if !ok {
		return nil, fail(path+".s", `must be a decimal string ("0.01"), the size`)
	}
	ot, ok := o["t"].(map[string]any)
	if !ok || len(ot) != 1 {
		return nil, fail(path+".t", `must be {"limit": {"tif": …}} or {"trigger": {"isMarket", "triggerPx", "tpsl"}}`)
	}
	leg := s.hyperliquidAction(KindHyperliquidOrder)
	fields := leg.Fields
	fields["asset"], fields["coin"], fields["market"], fields["p"], fields["s"] = asset, coin, "perp", pStr, sStr
	if spot {
		fields["market"] = "spot"
	}
	side := SideLong
	switch {
	case spot && isBuy:
		side = SideBuy
	case spot:
		side = SideSell
	case !isBuy:
		side = SideShort
	}
	limit := price
	trigger := false
	if lim, present := ot["limit"]; present {
		l, ok := lim.(map[string]any)
		if !ok || exactly(l, path+".t.limit", "tif") != nil {
			return nil, fail(path+".t.limit", `must be {"tif": "Gtc" | "Ioc" | "Alo"}`)
		}
		tif, _ := l["tif"].(string)
		if tif != "Gtc" && tif != "Ioc" && tif != "Alo" {
			return nil, fail(path+".t.limit.tif", `must be "Gtc", "Ioc" or "Alo"`)
		}
		fields["tif"] = tif
	} else if trg, present := ot["trigger"]; present {
		trigger = true
		tr, ok := trg.(map[string]any)
		if !ok {
			return nil, fail(path+".t.trigger", `must be {"isMarket", "triggerPx", "tpsl"}`)
		}
		if de := exactly(tr, path+".t.trigger", "isMarket", "triggerPx", "tpsl"); de != nil {
			return nil, de
		}
		isMarket, ok := tr["isMarket"].(bool)
		if !ok {
			return nil, fail(path+".t.trigger.isMarket", "must be a boolean")
		}
		pxStr, _ := tr["triggerPx"].(string)
		px, ok := hyperliquidDecimal(pxStr)
		if !ok || px.Sign() == 0 {
			return nil, fail(path+".t.trigger.triggerPx", "must be a decimal string > 0")
		}
		tpsl, _ := tr["tpsl"].(string)
		if tpsl != "tp" && tpsl != "sl" {
			return nil, fail(path+".t.trigger.tpsl", `must be "tp" or "sl"`)
		}
		fields["trigger"] = map[string]any{"isMarket": isMarket, "triggerPx": pxStr, "tpsl": tpsl}
		if isMarket {
			limit = marketTriggerBound(isBuy, price, px)
		}
	} else {
		return nil, fail(path+".t", `must be {"limit": …} or {"trigger": …}`)
	}
	if size.Sign() == 0 && !(trigger && reduce && grouping == "positionTpsl") {
		return nil, fail(path+".s", "must be > 0 (size 0 is only a positionTpsl trigger that closes the whole position)")
	}
	if c, present := o["c"]; present {
		s, ok := c.(string)
		if !ok || !isHex(s, 32) {
			return nil, fail(path+".c", "must be a client order id, 0x and 32 hex digits")
		}
		fields["cloid"] = s
	}
	if limit.Sign() == 0 {
		limit = nil // p "0": no price bound
	}
	leg.Coins = []string{coin}
	leg.Trade = s.trade()
	*leg.Trade = Trade{Kind: TradeOrder, Side: side, Market: coin, LimitPrice: limit, Size: size, ReduceOnly: reduce}
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

func (d HyperliquidDecoder) updateLeverage(action map[string]any) (*Action, *DecodeError) {
	if de := exactly(action, "action", "type", "asset", "isCross", "leverage"); de != nil {
		return nil, de
	}
	asset, ok := intOf(action["asset"], 0, hyperliquidSpotBase-1)
	if !ok {
		return nil, fail("action.asset", "must be a perp asset index (0 to 9999): spot has no leverage")
	}
	coin, _, de := d.coin(asset, "action.asset")
	if de != nil {
		return nil, de
	}
	cross, ok := action["isCross"].(bool)
	if !ok {
		return nil, fail("action.isCross", "must be a boolean")
	}
	lev, ok := intOf(action["leverage"], 1, maxHyperliquidLeverage)
	if !ok {
		return nil, fail("action.leverage", "must be an integer from 1 to 10000")
	}
	act := hyperliquidAction(KindHyperliquidUpdateLeverage)
	act.Fields = map[string]any{"asset": asset, "coin": coin, "isCross": cross, "leverage": lev}
	act.Coins = []string{coin}
	act.Trade = &Trade{Kind: TradeLeverage, Market: coin, Leverage: new(big.Rat).SetInt64(lev)}
	return act, nil
}

// cancel reads cancel {cancels: [{a, o}]} and cancelByCloid {cancels: [{asset, cloid}]}: no
// trade, no coin for assets.hyperliquid, nothing moved.
func (d HyperliquidDecoder) cancel(typ string, action map[string]any) (*Action, *DecodeError) {
	if de := exactly(action, "action", "type", "cancels"); de != nil {
		return nil, de
	}
	list, ok := action["cancels"].([]any)
	if !ok || len(list) == 0 || len(list) > maxHyperliquidCancels {
		return nil, fail("action.cancels", "must be an array of 1 to 256 cancels")
	}
	assetKey, idKey, kind := "a", "o", KindHyperliquidCancel
	if typ == "cancelByCloid" {
		assetKey, idKey, kind = "asset", "cloid", KindHyperliquidCancelByCloid
	}
	out := make([]map[string]any, len(list))
	for i, raw := range list {
		path := "action.cancels." + strconv.Itoa(i)
		c, ok := raw.(map[string]any)
		if !ok {
			return nil, fail(path, "must be an object {"+assetKey+", "+idKey+"}")
		}
		if de := exactly(c, path, assetKey, idKey); de != nil {
			return nil, de
		}
		asset, ok := intOf(c[assetKey], 0, 1<<31)
		if !ok {
			return nil, fail(path+"."+assetKey, "must be an asset index, a non-negative integer")
		}
		coin, _, de := d.coin(asset, path+"."+assetKey)
		if de != nil {
			return nil, de
		}
		entry := map[string]any{"asset": asset, "coin": coin}
		if typ == "cancelByCloid" {
			s, ok := c["cloid"].(string)
			if !ok || !isHex(s, 32) {
				return nil, fail(path+".cloid", "must be a client order id, 0x and 32 hex digits")
			}
			entry["cloid"] = s
		} else {
			oid, ok := intOf(c["o"], 0, 1<<62)
			if !ok {
				return nil, fail(path+".o", "must be an order id, a non-negative integer")
			}
			entry["o"] = oid
		}
		out[i] = entry
	}
	act := hyperliquidAction(kind)
	act.Fields = map[string]any{"cancels": out}
	return act, nil
}

// hyperliquidSend reads usdSend and withdraw3 {destination, amount, time?,
// signatureChainId?, hyperliquidChain?} and spotSend (the same and token).
func hyperliquidSend(typ string, action map[string]any) (*Action, *DecodeError) {
	members := []string{"type", "destination", "amount", "time", "signatureChainId", "hyperliquidChain"}
	if typ == "spotSend" {
		members = append(members, "token")
	}
	if de := exactly(action, "action", members...); de != nil {
		return nil, de
	}
	dest, de := addressMember(action, "destination")
	if de != nil {
		return nil, fail("action.destination", de.Problem)
	}
	amountStr, _ := action["amount"].(string)
	amount, ok := hyperliquidDecimal(amountStr)
	if !ok || amount.Sign() == 0 {
		return nil, fail("action.amount", `must be a decimal string > 0 ("1.5"), in whole units`)
	}
	fields := map[string]any{"destination": dest.Hex(), "amount": amountStr}
	if v, present := action["time"]; present {
		n, ok := intOf(v, 1, 1<<62)
		if !ok {
			return nil, fail("action.time", "must be a positive integer (milliseconds)")
		}
		fields["time"] = n
	}
	if v, present := action["signatureChainId"]; present {
		s, ok := v.(string)
		if !ok || !isHexQuantity(s) {
			return nil, fail("action.signatureChainId", `must be a hex chain id ("0xa4b1")`)
		}
		fields["signatureChainId"] = s
	}
	if v, present := action["hyperliquidChain"]; present {
		s, _ := v.(string)
		if s != "Mainnet" && s != "Testnet" {
			return nil, fail("action.hyperliquidChain", `must be "Mainnet" or "Testnet"`)
		}
		fields["hyperliquidChain"] = s
	}
	coin := CoinUSDC
	kind := KindHyperliquidUsdSend
	switch typ {
	case "withdraw3":
		kind = KindHyperliquidWithdraw
	case "spotSend":
		kind = KindHyperliquidSpotSend
		token, _ := action["token"].(string)
		name, ok := spotToken(token)
		if !ok {
			return nil, fail("action.token", `must be "NAME:0x" and 32 hex digits (the token's name and id)`)
		}
		coin = name
		fields["token"] = token
	}
	act := hyperliquidAction(kind)
	act.Fields = fields
	act.Recipients = []common.Address{dest}
	act.Coins = []string{coin}
	act.CoinAmounts = []CoinAmount{{Coin: coin, Amount: amount}}
	return act, nil
}

// spotToken reads a spot token "NAME:0x<32 hex>" and returns NAME.
func spotToken(s string) (string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] != ':' {
			continue
		}
		name := s[:i]
		if name == "" || len(name) > 32 || !isCoinName(name) || !isHex(s[i+1:], 32) {
			return "", false
		}
		return name, true
	}
	return "", false
}

// isCoinName reports whether s is a coin name assets.hyperliquid can hold, without ':'.
func isCoinName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '@' || c == '/' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// isHex reports whether s is 0x and exactly n hex digits.
func isHex(s string, n int) bool {
	if len(s) != 2+n || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') {
		return false
	}
	for i := 2; i < len(s); i++ {
		if !isHexDigit(s[i]) {
			return false
		}
	}
	return true
}

// isHexQuantity reports whether s is 0x and 1 to 16 hex digits.
func isHexQuantity(s string) bool {
	if len(s) < 3 || len(s) > 18 || s[0] != '0' || s[1] != 'x' {
		return false
	}
	for i := 2; i < len(s); i++ {
		if !isHexDigit(s[i]) {
			return false
		}
	}
	return true
}

func isHexDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// hyperliquidDecimal reads Hyperliquid's decimal strings: digits, optionally a point and
// more digits ("50000", "0.01", "50000.0"); no sign, no exponent, at most 40 characters.
func hyperliquidDecimal(s string) (*big.Rat, bool) {
	if s == "" || len(s) > maxHyperliquidDecimal {
		return nil, false
	}
	point := -1
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '.' && point < 0 && i > 0 && i < len(s)-1:
			point = i
		default:
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
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

// coins gathers the Hyperliquid coins of the action and its legs, without repeats.
func (ev *evaluation) coins() []string {
	var out []string
	ev.act.walk(func(a *Action) {
		for _, c := range a.Coins {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	})
	return out
}

// coinUniverse is the asset check over Hyperliquid coins: every one in assets.hyperliquid
// (docs/policy.md#hyperliquid-actions).
func (ev *evaluation) coinUniverse(coins []string) result {
	d := ev.in.Policy.Doc
	if d.Assets == nil || d.Assets.Hyperliquid == nil {
		return notChecked(policy.FieldHyperliquid + " is not configured")
	}
	universe := d.Assets.Hyperliquid
	for _, c := range coins {
		if !slices.Contains(universe, c) {
			return failed(verdict.ReasonAssetNotInUniverse, "coin "+c+" is not in "+policy.FieldHyperliquid, policy.FieldHyperliquid, coins, universe)
		}
	}
	return passed("every coin is in "+policy.FieldHyperliquid, policy.FieldHyperliquid, coins, universe)
}

// coinUSD prices a quantity of a Hyperliquid coin: USDC at 1 USD, any other coin at the
// reference price of the market of its name.
func (ev *evaluation) coinUSD(a *Action, c CoinAmount) (*big.Rat, bool) {
	if c.Amount == nil {
		return nil, false
	}
	if c.Coin == CoinUSDC {
		return new(big.Rat).Set(c.Amount), true
	}
	p, ok := ev.marketReference(a.Protocol, a.ChainID, c.Coin)
	if !ok {
		return nil, false
	}
	return new(big.Rat).Mul(c.Amount, p), true
}
