package verdictserver

import (
	"context"
	"net/http"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/hyperliquid"
)

// TestHyperliquidThroughTheAPI: an agent with a wallet registered for chain 1337 and a
// Hyperliquid policy submits orders through the HTTP API (docs/policy.md#hyperliquid-actions):
// a 3x BTC long within the policy is approved, the same order at 20x is rejected by the
// leverage cap, and an action type the decoder does not know is a decode failure.
func TestHyperliquidThroughTheAPI(t *testing.T) {
	e := newEnv(t, sqliteStore(t), nil)
	wallet := common.HexToAddress("0xA11CE00000000000000000000000000000000001")
	a := e.agent("hl", wallet, `{"venues": {"allowed": ["hyperliquid"]}, "chains": {"allowed": [1337]},
		"assets": {"hyperliquid": ["BTC"]}, "trading": {"sides": ["long"]}, "orders": {"requireLimitPrice": true},
		"perps": {"maxLeverage": 5}, "limits": {"perTxUsd": 2000}}`)
	if _, err := e.srv.Operator().AddWallet(context.Background(), a.ID, hyperliquid.ChainID, wallet.Hex()); err != nil {
		t.Fatal(err)
	}
	order := func(leverage int, typ string) map[string]any {
		return map[string]any{
			"escrowAddress": wallet.Hex(), "prompt": "go long 0.01 BTC", "arbiter": "policy",
			"proposedTx": map[string]any{"protocol": "hyperliquid", "chainId": hyperliquid.ChainID, "nonce": 1763640000000, "leverage": leverage,
				"action": map[string]any{"type": typ, "grouping": "na", "orders": []any{
					map[string]any{"a": 0, "b": true, "p": "100500", "s": "0.01", "r": false, "t": map[string]any{"limit": map[string]any{"tif": "Gtc"}}}}}},
		}
	}
	for _, tc := range []struct {
		name     string
		body     map[string]any
		reason   verdict.ReasonCode
		notional *float64
	}{
		{"a 3x long within the policy", order(3, "order"), verdict.ReasonAllowed, hlUSD(1005)},
		{"the same order at 20x", order(20, "order"), verdict.ReasonLeverageCapExceeded, hlUSD(1005)},
		{"an action type the decoder does not know", order(3, "twapOrder"), verdict.ReasonDecodeFailure, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := e.submit(a.Key, tc.body)
			if sub.status != http.StatusCreated {
				t.Fatalf("submit = %d %s", sub.status, sub.raw)
			}
			v := e.await(a.Key, sub.body["requestHash"].(string))
			if v.ReasonCode != tc.reason {
				t.Fatalf("verdict %s %s (%s), want %s", v.Outcome, v.ReasonCode, v.HumanReason, tc.reason)
			}
			if (tc.notional == nil) != (v.USDNotional == nil) || (tc.notional != nil && *tc.notional != *v.USDNotional) {
				t.Errorf("usdNotional %v, want %v", v.USDNotional, tc.notional)
			}
			if tc.reason != verdict.ReasonDecodeFailure && v.Evidence.DecodedAction["kind"] != hyperliquid.KindOrder {
				t.Errorf("decodedAction %v", v.Evidence.DecodedAction)
			}
		})
	}
}

func hlUSD(v float64) *float64 { return &v }
