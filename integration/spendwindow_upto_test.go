package integration_test

import (
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// TestUptoSettleCommitsWhatMoved: a verdict fleet whose bundled facilitator also settles
// `scheme upto` in DAI over Permit2, with a verdict key that holds verdicts:release:own
// (docs/spend-windows.md#reporting). The real @x402/evm upto client pays at most 0.01 DAI
// ($0.01) and the upstream reports 0.0037 DAI: the agent's window commits $0.0037, not the
// maximum, and keeps nothing reserved. A settle of 0 then releases its reservation at once.
func TestUptoSettleCommitsWhatMoved(t *testing.T) {
	f := newVerdictFleet(t, verdictSetup{})
	f.chain.InstallPermit2(t)
	g := &permit2Gate{chain: f.chain, dai: f.chain.DeployPlainToken(t, "DAI", 18), payTo: f.okPayTo}
	f.env = append(f.env, "DAI="+g.dai.Address.Hex())
	f.caddyfile = strings.NewReplacer(
		"asset_version 2\n", "asset_version 2\n\t\t\t\tpermit2_tokens {$DAI}\n",
		"price 84532 {$X402_TOKEN} 1 6 USDC\n", "price 84532 {$X402_TOKEN} 1 6 USDC\n\t\tprice 84532 {$DAI} 1 18 DAI\n",
		"\tx402 /denied/* {", "\tx402 /upto/* {\n\t\tscheme upto\n\t\tprice 0.01 DAI\n\t\tpay_to {$PAY_TO_OK}\n\t\tnetwork base-sepolia\n"+
			"\t\tasset {$DAI}\n\t\tdecimals 18\n\t\tsymbol DAI\n\t}\n\tx402 /denied/* {",
	).Replace(f.caddyfile)
	f.windowPolicy(t, "buyer", f.okPayTo, "0.05")
	f.key = strings.TrimSpace(f.cli(t, "key", "create", "--agent", "buyer",
		"--scope", "verdicts:create:own", "--scope", "verdicts:read:own", "--scope", "verdicts:release:own"))
	testenv.AddCanary("verdict agent key (releaser)", f.key)
	up, _ := meteredUpstream(t)
	in := f.start(t, "UPSTREAM="+up.URL)
	g.base = in.api
	g.chain.SetBalance(t, f.payer.Address, big.NewInt(1e18))
	g.dai.Mint(t, f.payer.Address, big.NewInt(1e18))
	g.dai.ApprovePermit2(t, f.payer)
	payee := g.dai.BalanceOf(t, g.payTo)

	out := g.pay(t, f.payer, "/upto/report?cost="+url.QueryEscape("0.0037 DAI"))
	if out.Status != http.StatusOK {
		t.Fatalf("the metered payment: status %d: %s", out.Status, out.Body)
	}
	g.wantDAI(t, g.payTo, payee, new(big.Int).Div(new(big.Int).Mul(daiPrice, big.NewInt(37)), big.NewInt(100)))
	if got := f.cli(t, "windows", "--agent", "buyer"); !strings.Contains(got, "day\t*\t0.05\t0.003700\t0.000000\t0.046300") {
		t.Fatalf("caddy verdict windows printed %q, want the $0.0037 that moved committed and nothing reserved", got)
	}

	zero := testenv.SignPermit2(t, f.payer, g.required(t, "/upto/free"))[0]
	if r := mustDo(t, http.MethodGet, g.base+"/upto/free?cost=0", map[string]string{"PAYMENT-SIGNATURE": zero}); r.Status != http.StatusOK {
		t.Fatalf("a cost of 0: %d %s", r.Status, r.Body)
	}
	if got := f.cli(t, "windows", "--agent", "buyer"); !strings.Contains(got, "day\t*\t0.05\t0.003700\t0.000000\t0.046300") {
		t.Fatalf("caddy verdict windows printed %q after a settle of 0, want its reservation released", got)
	}
}
