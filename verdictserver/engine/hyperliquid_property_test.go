package engine

import (
	"context"
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/hyperliquid"
	"github.com/x402gate/x402gate/verdictserver/policy"
)

// hlAction draws a Hyperliquid action from the decoder's shapes with random coins, sides,
// prices, sizes, parties and leverage, and sometimes breaks it (a wrong member or value).
func (g gen) hlAction() map[string]any {
	asset := func() any {
		if g.pick(10) == 0 {
			return json.Number([]string{"9", "100000", "-1"}[g.pick(3)]) // outside the coin table
		}
		return json.Number(strconv.Itoa([]int{0, 1, 5, 10107, 10000}[g.pick(5)]))
	}
	dec := func(vals ...string) string { return vals[g.pick(len(vals))] }
	addr := func() string { return addrPool[g.pick(len(addrPool))].Hex() }
	var action map[string]any
	switch g.pick(6) {
	case 0, 1, 2:
		var orders []any
		for range 1 + g.pick(3) {
			o := map[string]any{"a": asset(), "b": g.coin(), "p": dec("0", "3000", "99000", "100500", "150000", "40"),
				"s": dec("0.01", "1", "10", "0.01", "1", "10", "0"), "r": g.pick(4) == 0}
			if g.pick(3) == 0 {
				o["t"] = map[string]any{"trigger": map[string]any{"isMarket": g.coin(), "triggerPx": dec("90000", "110000", "3000"), "tpsl": dec("tp", "sl")}}
			} else {
				o["t"] = map[string]any{"limit": map[string]any{"tif": dec("Gtc", "Ioc", "Alo")}}
			}
			orders = append(orders, o)
		}
		action = map[string]any{"type": "order", "orders": orders, "grouping": dec("na", "normalTpsl", "positionTpsl")}
		if g.pick(4) == 0 {
			action["builder"] = map[string]any{"b": addr(), "f": json.Number("10")}
		}
	case 3:
		action = map[string]any{"type": "updateLeverage", "asset": asset(), "isCross": g.coin(), "leverage": json.Number(dec("1", "3", "5", "20"))}
	case 4:
		action = map[string]any{"type": dec("usdSend", "withdraw3", "spotSend"), "destination": addr(), "amount": dec("1", "1.5", "250", "10000")}
		if action["type"] == "spotSend" {
			action["token"] = dec("USDC:0x6d1e7cde53ba9467b783cb7c530ce054", "HYPE:0x0d01dc56dcaaca66ad901c959b4011ec", "PURR:0xc4bf3f870c0e9465323c0b6ed28096c2")
		}
	default:
		action = map[string]any{"type": "cancel", "cancels": []any{map[string]any{"a": asset(), "o": json.Number("7")}}}
	}
	tx := map[string]any{"protocol": "hyperliquid", "chainId": json.Number("1337"), "action": action}
	if action["type"] == "order" && g.coin() {
		tx["leverage"] = json.Number(dec("1", "3", "5", "20"))
	}
	if g.pick(4) == 0 && action["type"] != "usdSend" && action["type"] != "withdraw3" && action["type"] != "spotSend" {
		tx["vaultAddress"] = addr()
	}
	if g.pick(8) == 0 {
		switch g.pick(6) {
		case 0:
			action["type"] = dec("updateIsolatedMargin", "modify", "twapOrder", "ORDER")
		case 1:
			tx["chainId"] = json.Number(dec("999", "1", "42161"))
		case 2:
			action["extra"] = true
		case 3:
			tx["signature"] = "0x00"
		case 4:
			delete(tx, "action")
		default:
			if orders, ok := action["orders"].([]any); ok {
				orders[0].(map[string]any)["p"] = dec("-1", "1e5", "1/2", ".5", "")
			} else {
				action["amount"] = "0"
			}
		}
	}
	return tx
}

// hlPolicy adds Hyperliquid sections to a generated policy: the venue and chain most of the
// time, a coin universe, sides, price bounds, a leverage cap and a cap.
func (g gen) hlPolicy(pol *policy.Policy) {
	d := pol.Doc
	if d.Venues != nil && g.pick(6) > 0 {
		d.Venues.Allowed = append(slices.Clone(d.Venues.Allowed), "hyperliquid")
	}
	if d.Chains != nil && g.pick(6) > 0 {
		d.Chains.Allowed = append(slices.Clone(d.Chains.Allowed), hyperliquid.ChainID)
	}
	if g.coin() {
		var coins []string
		for _, c := range []string{"BTC", "ETH", "@107", "USDC", "HYPE"} {
			if g.pick(3) > 0 {
				coins = append(coins, c)
			}
		}
		if d.Assets == nil {
			d.Assets = &policy.Assets{}
		}
		d.Assets.Hyperliquid = append([]string{}, coins...)
	}
	if g.coin() {
		d.Trading = &policy.Trading{Sides: [][]string{{"long"}, {"long", "short"}, {"buy", "sell", "long"}}[g.pick(3)]}
	}
	if g.coin() {
		yes, bps := g.coin(), []int{100, 1000, 2000}[g.pick(3)]
		d.Orders = &policy.Orders{RequireLimitPrice: &yes, MaxPriceDeviationBps: &bps}
	}
	if g.coin() {
		lev := []float64{1, 5, 20}[g.pick(3)]
		d.Perps = &policy.Perps{MaxLeverage: &lev}
	}
}

// TestEveryHyperliquidVerdictIsConsistent is the property test over the Hyperliquid
// decoder: every verdict passes the verdict package's validator and the client's strict
// parser, and is decided by the first failed check in the fixed order; an action that does
// not decode is decode_failure; an approved one decodes and keeps every constraint the
// policy sets (no sink or listed party, sides, coins, leverage, price bound, cap).
func TestEveryHyperliquidVerdictIsConsistent(t *testing.T) {
	e := newEngine(t, Config{}, Deps{References: hlMarks})
	counts := map[verdict.ReasonCode]int{}
	for seed := uint64(1); seed <= 3000; seed++ {
		g := gen{rand.New(rand.NewPCG(seed, 1337))}
		pol := g.policy(t)
		if pol != nil {
			g.hlPolicy(pol)
		}
		tx := g.hlAction()
		v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tx, Policy: pol})
		body := mustBeValid(t, v)
		counts[v.ReasonCode]++
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d: "+format+"\n%s", append([]any{seed}, append(args, body)...)...)
		}
		act, de := hyperliquid.Decoder{}.Decode(tx)
		if pol == nil {
			continue
		}
		if de != nil {
			if v.ReasonCode != verdict.ReasonDecodeFailure {
				fail("%s for an action that does not decode (%v)", v.ReasonCode, de)
			}
			continue
		}
		var first *verdict.Check
		for _, id := range reasonOrder {
			if c := checkOf(v, id); c.Status == verdict.CheckFailed {
				first = &c
				break
			}
		}
		if first != nil {
			if v.ReasonCode != *first.Code {
				fail("reasonCode %s, but the first failed check is %s", v.ReasonCode, first.CheckID)
			}
			continue
		}
		if !v.Approved() {
			fail("no failed check but %s", v.Outcome)
		}
		d := pol.Doc
		act.Walk(func(a *Action) {
			for _, r := range a.Recipients {
				if _, sink := builtinSink(r); sink || e.sanctions.Load().Contains(r) {
					fail("approved a recipient %s that is a sink or listed", r.Hex())
				}
			}
			for _, s := range a.Screen {
				if e.sanctions.Load().Contains(s) {
					fail("approved a listed party %s", s.Hex())
				}
			}
			for _, c := range a.Coins {
				if d.Assets != nil && d.Assets.Hyperliquid != nil && !slices.Contains(d.Assets.Hyperliquid, c) {
					fail("approved coin %s outside %v", c, d.Assets.Hyperliquid)
				}
			}
			tr := a.Trade
			if tr == nil {
				return
			}
			if tr.Kind == TradeOrder && !tr.ReduceOnly && d.Trading != nil && !slices.Contains(d.Trading.Sides, tr.Side) {
				fail("approved side %s outside %v", tr.Side, d.Trading.Sides)
			}
			if tr.Leverage != nil && d.Perps != nil && d.Perps.MaxLeverage != nil {
				if f, _ := tr.Leverage.Float64(); f > *d.Perps.MaxLeverage {
					fail("approved leverage %v over %v", f, *d.Perps.MaxLeverage)
				}
			}
			if tr.Kind == TradeOrder && d.Orders != nil && (tr.LimitPrice == nil || tr.LimitPrice.Sign() == 0) {
				fail("approved an order without a limit price under an orders section")
			}
			if tr.Kind == TradeOrder && d.Orders != nil && d.Orders.MaxPriceDeviationBps != nil {
				if ref, ok := hlMarks[tr.Market]; ok {
					r := rat(ref)
					dev := new(big.Rat).Sub(tr.LimitPrice, r)
					dev.Abs(dev).Quo(dev, r).Mul(dev, big.NewRat(10000, 1))
					if dev.Cmp(big.NewRat(int64(*d.Orders.MaxPriceDeviationBps), 1)) > 0 {
						fail("approved a limit price %s bps from the reference", dev.FloatString(2))
					}
				}
			}
		})
		if d.Limits != nil && d.Limits.PerTxUSD != nil && v.USDNotional != nil && *v.USDNotional > *d.Limits.PerTxUSD {
			fail("approved %v USD over the cap %v", *v.USDNotional, *d.Limits.PerTxUSD)
		}
	}
	t.Logf("reason codes over 3000 random Hyperliquid actions: %v", counts)
	for _, c := range []verdict.ReasonCode{verdict.ReasonAllowed, verdict.ReasonDecodeFailure, verdict.ReasonVenueNotAllowed, verdict.ReasonChainNotAllowed,
		verdict.ReasonAssetNotInUniverse, verdict.ReasonRecipientNotAllowed, verdict.ReasonSideNotAllowed, verdict.ReasonNoExecutionPriceBound,
		verdict.ReasonLeverageCapExceeded, verdict.ReasonSanctionedAddress, verdict.ReasonSinkRecipient, verdict.ReasonPerTxCapExceeded, verdict.ReasonDataUnavailable} {
		if counts[c] == 0 {
			t.Errorf("the generator never produced %s: widen it", c)
		}
	}
}
