package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"sync"
	"testing"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/erc20"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
)

// TestConcurrentEvaluationsAnswerAlike: evaluations running at once, of different actions
// that share the engine's caches (intern.go) and the evidence strings they hand out, answer
// byte for byte what one evaluation alone answers (run with -race).
func TestConcurrentEvaluationsAnswerAlike(t *testing.T) {
	e := newEngine(t, Config{}, Deps{References: hlMarks})
	uni := mustPolicy(t, 1, uniPolicy)
	hl := mustPolicy(t, 1, `{"venues": {"allowed": ["hyperliquid"]}, "chains": {"allowed": [1337]}, "assets": {"hyperliquid": ["BTC", "ETH"]},
		"trading": {"sides": ["long", "short"]}, "orders": {"requireLimitPrice": true, "maxPriceDeviationBps": 100}, "perps": {"maxLeverage": 5},
		"limits": {"perTxUsd": 2000}, "recipients": {"allowed": ["self"]}}`)
	inputs := []Input{
		{Escrow: escrow, ProposedTx: evmTx("evm", 84532, usdc, pack(t, erc20.ABI, "transfer(address,uint256)", payee, e6(5)), nil), Policy: mustPolicy(t, 1, evmPolicy)},
		{Escrow: escrow, ProposedTx: evmTx("uniswap", 84532, router02, pack(t, uniswap.RouterABI, "exactInputSingle((address,address,uint24,address,uint256,uint256,uint160))",
			single02{usdc, weth, big.NewInt(500), uniswap.MsgSender, e6(3000), milli18(995), new(big.Int)}), nil), Policy: uni},
		{Escrow: escrow, ProposedTx: evmTx("uniswap", 84532, urV21, execute(t, []byte{uniswap.CmdV3SwapExactIn, uniswap.CmdUnwrapWETH},
			urV3In(t, uniswap.AddressThis, e6(3000), milli18(995), v3path(usdc, weth), true, true), urToAmount(t, uniswap.MsgSender, milli18(995))), nil), Policy: uni},
		{Escrow: escrow, Policy: hl, ProposedTx: hlTx(t, []byte(`{"action": {"type": "order", "orders": [{"a": 0, "b": true, "p": "100500", "s": "0.01", "r": false, "t": {"limit": {"tif": "Gtc"}}}], "grouping": "na"}, "nonce": 1763640000000, "leverage": 3}`))},
		{Escrow: escrow, ProposedTx: payment(), Policy: mustPolicy(t, 3, basePolicy)},
	}
	answer := func(in Input) []byte {
		v := e.Evaluate(context.Background(), in)
		v.LatencyMs = 0
		b, err := json.Marshal(v)
		if err != nil {
			t.Error(err)
		}
		return b
	}
	want := make([][]byte, len(inputs))
	for i, in := range inputs {
		want[i] = answer(in)
		var v verdict.Verdict
		if err := json.Unmarshal(want[i], &v); err != nil || v.Outcome != verdict.OutcomeApproved {
			t.Fatalf("input %d: %s", i, want[i])
		}
	}
	// Judge recycles a verdict's memory once its use returns: whatever ran before, in this
	// goroutine or another, its verdict is Evaluate's, byte for byte. The inputs add a
	// rejection, a decode failure and an agent without a policy, whose evidence has other
	// members, so that a member left over from an earlier verdict would show; the payments
	// with more and fewer members than the first one, its decoded fields.
	inputs = append(inputs,
		Input{Escrow: escrow, ProposedTx: payment(set("scheme", "upto"), set("transfer", "permit2")), Policy: mustPolicy(t, 3, basePolicy)},
		Input{Escrow: escrow, ProposedTx: payment(func(tx map[string]any) { delete(tx, "resource") }), Policy: mustPolicy(t, 3, basePolicy)},
		Input{Escrow: escrow, ProposedTx: evmTx("uniswap", 84532, router02, []byte{0xde, 0xad, 0xbe, 0xef, 1}, nil), Policy: uni},
		Input{Escrow: escrow, ProposedTx: evmTx("evm", 84532, usdc, pack(t, erc20.ABI, "transfer(address,uint256)", payee, e6(5)), nil)},
		Input{Escrow: escrow, Policy: hl, ProposedTx: hlTx(t, []byte(`{"action": {"type": "order", "orders": [{"a": 0, "b": true, "p": "150000", "s": "0.01", "r": false, "t": {"limit": {"tif": "Gtc"}}}], "grouping": "na"}, "nonce": 1763640000000, "leverage": 20}`))},
	)
	for _, in := range inputs[len(want):] {
		want = append(want, answer(in))
	}
	judged := func(in Input) []byte {
		var b []byte
		e.Judge(context.Background(), in, func(v *verdict.Verdict) {
			v.LatencyMs = 0
			var err error
			if b, err = json.Marshal(v); err != nil {
				t.Error(err)
			}
		})
		return b
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for n := range 40 {
				i := (g + n) % len(inputs)
				got, how := answer(inputs[i]), "Evaluate"
				if n%3 != 0 { // 3 and len(inputs) are coprime: every input is judged too
					got, how = judged(inputs[i]), "Judge"
				}
				if !bytes.Equal(got, want[i]) {
					t.Errorf("input %d: %s answered\n%s\nalone Evaluate answers\n%s", i, how, got, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
}
