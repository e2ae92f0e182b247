package engine

import (
	"context"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
)

// actionDecoder hands the engine the Action named by proposedTx.case: it exercises the
// generic checks on the shared Action model (Trade, Allowances, Legs) before and beside the
// protocol decoders that fill it.
type actionDecoder map[string]*Action

func (actionDecoder) Protocol() string { return "fixture" }

func (d actionDecoder) Decode(tx map[string]any) (*Action, error) {
	name, _ := tx["case"].(string)
	a, ok := d[name]
	if !ok {
		return nil, &DecodeError{Field: "proposedTx.case", Problem: "unknown"}
	}
	return a, nil
}

// marks is a ReferencePrices of fixed marks.
type marks map[string]string

func (m marks) ReferencePrice(_ string, _ int64, market string) (Reference, bool) {
	s, ok := m[market]
	if !ok {
		return Reference{}, false
	}
	p, _ := new(big.Rat).SetString(s)
	return Reference{Price: p, Source: "test.marks", AsOf: clock.Add(-time.Second)}, true
}

func rat(s string) *big.Rat { r, _ := new(big.Rat).SetString(s); return r }
func wei(s string) *big.Int { n, _ := new(big.Int).SetString(s, 10); return n }

func fixture(kind string, mut func(*Action)) *Action {
	a := &Action{Protocol: "fixture", ChainID: 84532, Kind: kind}
	if mut != nil {
		mut(a)
	}
	return a
}

// swap of 1 WETH (3000 USD) for at least minOut USDC (base units, 6 decimals), to escrow.
func swapLeg(minOut string) *Action {
	return fixture("fixture.swap", func(a *Action) {
		a.Assets = []common.Address{weth, usdc}
		a.Recipients = []common.Address{escrow}
		t := &Trade{Kind: TradeSwap, Side: SideSell, AssetIn: weth, AssetOut: usdc, AmountIn: wei("1000000000000000000")}
		if minOut != "" {
			t.MinOut = wei(minOut)
		}
		a.Trade = t
	})
}

func order(side, limit, size string, lev string, reduce bool) *Action {
	return fixture("fixture.order", func(a *Action) {
		t := &Trade{Kind: TradeOrder, Side: side, Market: "BTC", Size: rat(size), ReduceOnly: reduce}
		if limit != "" {
			t.LimitPrice = rat(limit)
		}
		if lev != "" {
			t.Leverage = rat(lev)
		}
		a.Trade = t
	})
}

func TestTradeChecksOnTheSharedActionModel(t *testing.T) {
	const venue = `"venues": {"allowed": ["fixture"]}, "chains": {"allowed": [84532]}`
	unlimited := fixture("fixture.approve", func(a *Action) {
		a.Recipients, a.Assets, a.Notional = []common.Address{payee}, []common.Address{usdc}, []Amount{}
		a.Allowances = []Allowance{{Spender: payee, Asset: usdc, Amount: actions.MaxUint256, Unlimited: true}}
	})
	cases := actionDecoder{
		"swap-guarded": swapLeg("2985000000"), // 50 bps below 3000 USD
		"swap-loose":   swapLeg("2900000000"), // 333 bps
		"swap-zero":    swapLeg("0"),
		"swap-none":    swapLeg(""),
		"swap-both": fixture("fixture.swap", func(a *Action) {
			a.Trade = &Trade{Kind: TradeSwap, AssetIn: weth, AssetOut: stranger, AmountIn: wei("1"), MinOut: wei("1")}
		}),
		"swap-unpriced": fixture("fixture.swap", func(a *Action) {
			a.Trade = &Trade{Kind: TradeSwap, Side: SideBuy, AssetIn: usdc, AssetOut: stranger, AmountIn: wei("1000000"), MinOut: wei("5")}
		}),
		"exact-out-open": fixture("fixture.swap", func(a *Action) {
			a.Trade = &Trade{Kind: TradeSwap, Side: SideBuy, ExactOut: true, AssetIn: usdc, AssetOut: weth, AmountOut: wei("1000000000000000000"), MaxIn: actions.MaxUint256}
		}),
		"exact-out-3pct": fixture("fixture.swap", func(a *Action) {
			a.Trade = &Trade{Kind: TradeSwap, Side: SideBuy, ExactOut: true, AssetIn: usdc, AssetOut: weth, AmountOut: wei("1000000000000000000"), MaxIn: wei("3090000000")}
		}),
		"long-near":    order(SideLong, "100500", "0.01", "", false),
		"long-far":     order(SideLong, "150000", "0.01", "", false),
		"long-market":  order(SideLong, "", "0.01", "", false),
		"short-reduce": order(SideShort, "99000", "0.01", "", true),
		"long-20x":     order(SideLong, "100000", "0.01", "20", false),
		"eth-unmarked": fixture("fixture.order", func(a *Action) {
			a.Trade = &Trade{Kind: TradeOrder, Side: SideLong, Market: "ETH", Size: rat("1"), LimitPrice: rat("3000")}
		}),
		"leverage-5": fixture("fixture.leverage", func(a *Action) { a.Trade = &Trade{Kind: TradeLeverage, Market: "BTC", Leverage: rat("5")} }),
		"unlimited":  unlimited,
		"nested-sanctioned": fixture("fixture.multicall", func(a *Action) {
			a.Legs = []*Action{swapLeg("2985000000"), fixture("fixture.batch", func(b *Action) {
				b.Legs = []*Action{fixture("fixture.transfer", func(c *Action) {
					c.Recipients, c.Assets, c.Notional = []common.Address{listed}, []common.Address{usdc}, []Amount{{Asset: usdc, Value: wei("1000000")}}
				})}
			})}
		}),
		"two-swaps": fixture("fixture.multicall", func(a *Action) { a.Legs = []*Action{swapLeg("2985000000"), swapLeg("0")} }),
		"stranded":  fixture("fixture.swap", func(a *Action) { a.Stranded = []common.Address{stranger}; a.Trade = swapLeg("2985000000").Trade }),
		"bad-leg":   fixture("fixture.multicall", func(a *Action) { a.Legs = []*Action{{Protocol: "fixture", ChainID: 8453, Kind: "x"}} }),
	}
	e := newEngine(t, Config{}, Deps{Decoders: []Decoder{cases}, References: marks{"BTC": "100000"}})
	P, F, N := verdict.CheckPassed, verdict.CheckFailed, verdict.CheckNotChecked
	type st = map[verdict.CheckID]verdict.CheckStatus
	for _, tc := range []struct {
		name, action, policy string
		reason               verdict.ReasonCode
		field                string
		status               st
		usd                  float64 // -1: null, -2: not asserted
	}{
		{"a swap within maxSlippageBps of the price table passes", "swap-guarded", `"swaps": {"requireMinOut": true, "maxSlippageBps": 50}, "trading": {"sides": ["sell"]}, "limits": {"perTxUsd": 5000}`,
			verdict.ReasonAllowed, "", st{"side": P, "slippage_guard": P, "execution_price_bound": N, "leverage": N, "per_tx_cap": P}, 3000},
		{"a swap looser than maxSlippageBps fails", "swap-loose", `"swaps": {"maxSlippageBps": 50}`,
			verdict.ReasonNoSlippageGuard, "swaps.maxSlippageBps", st{"slippage_guard": F}, 3000},
		{"a swap with zero minimum out fails requireMinOut", "swap-zero", `"swaps": {"requireMinOut": true}`,
			verdict.ReasonNoSlippageGuard, "swaps.requireMinOut", st{"slippage_guard": F}, 3000},
		{"a swap without minimum out fails requireMinOut", "swap-none", `"swaps": {"requireMinOut": true}`,
			verdict.ReasonNoSlippageGuard, "swaps.requireMinOut", st{"slippage_guard": F}, 3000},
		{"zero minimum out is 10000 bps of slippage without any price", "swap-zero", `"swaps": {"maxSlippageBps": 9999}`,
			verdict.ReasonNoSlippageGuard, "swaps.maxSlippageBps", st{"slippage_guard": F}, 3000},
		{"a swap without a reference price cannot be held to maxSlippageBps: data_unavailable", "swap-unpriced", `"swaps": {"maxSlippageBps": 50}`,
			verdict.ReasonDataUnavailable, "swaps.maxSlippageBps", st{"slippage_guard": F}, 1},
		{"unconfigured swaps leave slippage_guard not_checked", "swap-zero", ``,
			verdict.ReasonAllowed, "", st{"slippage_guard": N, "side": N}, 3000},
		{"an exact-output swap with an unbounded input fails", "exact-out-open", `"swaps": {"requireMinOut": true}`,
			verdict.ReasonNoSlippageGuard, "swaps.requireMinOut", st{"slippage_guard": F}, -2},
		{"an exact-output swap 300 bps over the reference fails a 100 bps bound", "exact-out-3pct", `"swaps": {"maxSlippageBps": 100}`,
			verdict.ReasonNoSlippageGuard, "swaps.maxSlippageBps", st{"slippage_guard": F}, 3090},
		{"an exact-output swap 300 bps over the reference passes a 300 bps bound", "exact-out-3pct", `"swaps": {"maxSlippageBps": 300}`,
			verdict.ReasonAllowed, "", st{"slippage_guard": P}, 3090},
		{"a token-for-token swap is both a buy and a sell", "swap-both", `"trading": {"sides": ["buy"]}`,
			verdict.ReasonSideNotAllowed, "trading.sides", st{"side": F}, 3e-15},
		{"a token-for-token swap passes when buy and sell are allowed", "swap-both", `"trading": {"sides": ["buy", "sell"]}`,
			verdict.ReasonAllowed, "", st{"side": P}, 3e-15},
		{"a sell swap against buy-only fails", "swap-guarded", `"trading": {"sides": ["buy"]}`,
			verdict.ReasonSideNotAllowed, "trading.sides", st{"side": F}, 3000},
		{"a long order near the reference passes", "long-near", `"trading": {"sides": ["long"]}, "orders": {"requireLimitPrice": true, "maxPriceDeviationBps": 100}, "limits": {"perTxUsd": 1005}`,
			verdict.ReasonAllowed, "", st{"side": P, "execution_price_bound": P, "slippage_guard": N, "per_tx_cap": P}, 1005},
		{"a limit order far from the reference fails", "long-far", `"orders": {"maxPriceDeviationBps": 100}`,
			verdict.ReasonNoExecutionPriceBound, "orders.maxPriceDeviationBps", st{"execution_price_bound": F}, 1500},
		{"an order without a limit price fails requireLimitPrice", "long-market", `"orders": {"requireLimitPrice": true}`,
			verdict.ReasonNoExecutionPriceBound, "orders.requireLimitPrice", st{"execution_price_bound": F}, 1000},
		{"an order without a limit price has nothing to bound", "long-market", `"orders": {"maxPriceDeviationBps": 100}`,
			verdict.ReasonNoExecutionPriceBound, "orders.maxPriceDeviationBps", st{"execution_price_bound": F}, 1000},
		{"an order on a market without a reference cannot be held to the bound: data_unavailable", "eth-unmarked", `"orders": {"maxPriceDeviationBps": 100}`,
			verdict.ReasonDataUnavailable, "orders.maxPriceDeviationBps", st{"execution_price_bound": F}, 3000},
		{"a short order against long-only fails", "long-near", `"trading": {"sides": ["short"]}`,
			verdict.ReasonSideNotAllowed, "trading.sides", st{"side": F}, 1005},
		{"a reduce-only order passes any side", "short-reduce", `"trading": {"sides": ["long"]}`,
			verdict.ReasonAllowed, "", st{"side": P}, 1000},
		{"a 20x order against a 5x cap fails", "long-20x", `"perps": {"maxLeverage": 5}`,
			verdict.ReasonLeverageCapExceeded, "perps.maxLeverage", st{"leverage": F}, 1000},
		{"setting 5x under a 5x cap passes and moves nothing", "leverage-5", `"perps": {"maxLeverage": 5}, "trading": {"sides": ["long"]}, "limits": {"perTxUsd": 1}`,
			verdict.ReasonAllowed, "", st{"leverage": P, "side": N, "per_tx_cap": N}, 0},
		{"an order over the cap, priced by size × limit", "long-near", `"limits": {"perTxUsd": 1000}`,
			verdict.ReasonPerTxCapExceeded, "limits.perTxUsd", st{"per_tx_cap": F}, 1005},
		{"an unlimited approval exceeds any cap: it is priced at its amount", "unlimited", `"limits": {"perTxUsd": 1000000}`,
			verdict.ReasonPerTxCapExceeded, "limits.perTxUsd", st{"per_tx_cap": F, "recipient": N}, unlimitedUSDC},
		{"an unlimited approval without a cap is not_checked, and flagged in evidence", "unlimited", ``,
			verdict.ReasonAllowed, "", st{"per_tx_cap": N}, unlimitedUSDC},
		{"a sanctioned recipient two legs deep is found", "nested-sanctioned", ``,
			verdict.ReasonSanctionedAddress, "", st{"sanctions": F, "sink_recipient": P}, 3001},
		{"a nested recipient the allow-list lacks", "nested-sanctioned", `"recipients": {"allowed": ["self"]}`,
			verdict.ReasonRecipientNotAllowed, "recipients.allowed", st{"recipient": F, "sanctions": F}, 3001},
		{"every swap leg is guarded: the second has zero minimum out", "two-swaps", `"swaps": {"requireMinOut": true}, "limits": {"perTxUsd": 6000}`,
			verdict.ReasonNoSlippageGuard, "swaps.requireMinOut", st{"slippage_guard": F, "per_tx_cap": P}, 6000},
		{"value stranded at a router is a sink", "stranded", ``,
			verdict.ReasonSinkRecipient, "", st{"sink_recipient": F}, 3000},
		{"a leg on another chain is a decode failure", "bad-leg", ``,
			verdict.ReasonDecodeFailure, "", st{"venue": P, "side": N}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := "{" + venue
			if tc.policy != "" {
				doc += ", " + tc.policy
			}
			v := e.Evaluate(context.Background(), Input{Escrow: escrow, Policy: mustPolicy(t, 1, doc+"}"),
				ProposedTx: map[string]any{"protocol": "fixture", "chainId": int64(84532), "case": tc.action}})
			body := mustBeValid(t, v)
			field := ""
			if v.TriggeringPolicyField != nil {
				field = *v.TriggeringPolicyField
			}
			if v.ReasonCode != tc.reason || field != tc.field {
				t.Fatalf("%s %q, want %s %q: %s\n%s", v.ReasonCode, field, tc.reason, tc.field, v.HumanReason, body)
			}
			for id, s := range tc.status {
				if c := checkOf(v, id); c.Status != s {
					t.Errorf("%s: %s (%s), want %s", id, c.Status, c.HumanReason, s)
				}
			}
			switch {
			case tc.usd == -1 && v.USDNotional != nil && tc.reason != verdict.ReasonDecodeFailure:
				t.Errorf("usdNotional %v, want null", *v.USDNotional)
			case tc.usd >= 0 && (v.USDNotional == nil || *v.USDNotional != tc.usd):
				t.Errorf("usdNotional %v, want %v", v.USDNotional, tc.usd)
			}
		})
	}
}

// unlimitedUSDC is an allowance of 2^256-1 base units of USDC, in USD.
var unlimitedUSDC = ratFloat64(new(big.Rat).SetFrac(actions.MaxUint256, big.NewInt(1e6)))

func TestTradeEvidence(t *testing.T) {
	cases := actionDecoder{
		"unlimited": fixture("fixture.approve", func(a *Action) {
			a.Recipients, a.Assets, a.Notional = []common.Address{payee}, []common.Address{usdc}, []Amount{}
			a.Allowances = []Allowance{{Spender: payee, Asset: usdc, Amount: actions.MaxUint256, Unlimited: true}}
		}),
		"multi": fixture("fixture.multicall", func(a *Action) {
			a.Legs = []*Action{swapLeg("2900000000"), order(SideLong, "150000", "0.01", "3", false)}
		}),
	}
	e := newEngine(t, Config{}, Deps{Decoders: []Decoder{cases}, References: marks{"BTC": "100000"}})
	pol := mustPolicy(t, 1, `{"venues": {"allowed": ["fixture"]}, "chains": {"allowed": [84532]}, "swaps": {"maxSlippageBps": 500}, "orders": {"maxPriceDeviationBps": 10000}}`)
	v := e.Evaluate(context.Background(), Input{Escrow: escrow, Policy: pol, ProposedTx: map[string]any{"protocol": "fixture", "chainId": int64(84532), "case": "unlimited"}})
	mustBeValid(t, v)
	ap := v.Evidence.DecodedAction["approvals"].([]map[string]any)[0]
	if ap["unlimited"] != true || ap["spender"] != payee.Hex() {
		t.Errorf("approval evidence %v", ap)
	}
	v = e.Evaluate(context.Background(), Input{Escrow: escrow, Policy: pol, ProposedTx: map[string]any{"protocol": "fixture", "chainId": int64(84532), "case": "multi"}})
	mustBeValid(t, v)
	if v.Outcome != verdict.OutcomeApproved {
		t.Fatalf("%s: %s", v.ReasonCode, v.HumanReason)
	}
	legs := v.Evidence.DecodedAction["legs"].([]map[string]any)
	if len(legs) != 2 || legs[0]["trade"].(*swapInTrade).MinOut != "2900000000" || legs[1]["trade"].(*orderTrade).LimitPrice != "150000" {
		t.Errorf("legs %v", legs)
	}
	slip := v.Evidence.Observations["slippage_guard"].(*Observation).Observed.([]any)[0].(*swapInObserved)
	if bps := slip.SlippageBps.(float64); bps < 333.3 || bps > 333.4 {
		t.Errorf("slippage observation %v", slip)
	}
	dev := v.Evidence.Observations["execution_price_bound"].(*Observation).Observed.([]orderObserved)[0]
	if dev.DeviationBps != 5000.0 || dev.Reference != "100000" {
		t.Errorf("deviation observation %v", dev)
	}
	var names []string
	for _, s := range v.DataFreshness.Sources {
		names = append(names, s["name"].(string))
	}
	if len(names) != 4 || !slices.Contains(names, "prices") || !slices.Contains(names, "test.marks") || !slices.Contains(names, "order") {
		t.Errorf("sources %v", names)
	}
}
