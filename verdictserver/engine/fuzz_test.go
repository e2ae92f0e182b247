package engine

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/x402payment"
)

// FuzzEvaluateProposedTx: whatever object arrives as proposedTx, Evaluate answers a valid
// terminal verdict, and approves only a payment that decoded.
func FuzzEvaluateProposedTx(f *testing.F) {
	for _, s := range []string{
		`{"protocol":"payment","rail":"x402","chainId":84532,"payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","amount":"10000"}`,
		`{"protocol":"payment","rail":"x402","chainId":84532,"payTo":"0x1111111111111111111111111111111111111111","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","amount":"99999999999","resource":"https://x"}`,
		`{"protocol":"payment","rail":"x402","chainId":"84532","payTo":"0x0","asset":"","amount":1}`,
		`{"protocol":"payment","rail":"x402","chainId":84532,"payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","amount":"4000000","scheme":"upto","transfer":"permit2"}`,
		`{"protocol":"payment","rail":"x402","chainId":84532,"payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","amount":"10000","scheme":"upto","transfer":"eip3009"}`,
		`{"protocol":"uniswap","chainId":8453}`,
		`{"protocol":7}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	e := newEngine(f, Config{}, Deps{})
	pol := mustPolicy(f, 1, basePolicy)
	f.Fuzz(func(t *testing.T, raw []byte) {
		tree, err := verdict.ParseJSON(raw)
		if err != nil {
			return
		}
		tx, ok := tree.(map[string]any)
		if !ok {
			return
		}
		v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tx, Policy: pol})
		mustBeValid(t, v)
		if v.Approved() {
			if _, de := (x402payment.Decoder{}).Decode(tx); de != nil || tx["protocol"] != "payment" {
				body, _ := json.Marshal(tx)
				t.Fatalf("approved an action that does not decode: %s", body)
			}
		}
	})
}
