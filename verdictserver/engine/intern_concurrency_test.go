package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"sync"
	"testing"

	"github.com/x402gate/x402gate/verdict"
)

// TestConcurrentEvaluationsAnswerAlike: evaluations running at once, of different actions
// that share the engine's caches (intern.go) and the evidence strings they hand out, answer
// byte for byte what one evaluation alone answers (run with -race).
func TestConcurrentEvaluationsAnswerAlike(t *testing.T) {
	e := newEngine(t, Options{References: hlMarks})
	uni := mustPolicy(t, 1, uniPolicy)
	hl := mustPolicy(t, 1, `{"venues": {"allowed": ["hyperliquid"]}, "chains": {"allowed": [1337]}, "assets": {"hyperliquid": ["BTC", "ETH"]},
		"trading": {"sides": ["long", "short"]}, "orders": {"requireLimitPrice": true, "maxPriceDeviationBps": 100}, "perps": {"maxLeverage": 5},
		"limits": {"perTxUsd": 2000}, "recipients": {"allowed": ["self"]}}`)
	inputs := []Input{
		{Escrow: escrow, ProposedTx: evmTx("evm", 84532, usdc, pack(t, tokenABI, "transfer(address,uint256)", payee, e6(5)), nil), Policy: mustPolicy(t, 1, evmPolicy)},
		{Escrow: escrow, ProposedTx: evmTx("uniswap", 84532, router02, pack(t, routerABI, "exactInputSingle((address,address,uint24,address,uint256,uint256,uint160))",
			single02{usdc, weth, big.NewInt(500), msgSender, e6(3000), milli18(995), new(big.Int)}), nil), Policy: uni},
		{Escrow: escrow, ProposedTx: evmTx("uniswap", 84532, urV21, execute(t, []byte{cmdV3SwapExactIn, cmdUnwrapWETH},
			urV3In(t, addressThis, e6(3000), milli18(995), v3path(usdc, weth), true, true), urToAmount(t, msgSender, milli18(995))), nil), Policy: uni},
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
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for n := range 40 {
				i := (g + n) % len(inputs)
				if got := answer(inputs[i]); !bytes.Equal(got, want[i]) {
					t.Errorf("input %d answered\n%s\nalone it answers\n%s", i, got, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
}
