package gate

import (
	"math/big"
	"slices"
	"testing"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/facilitator/facilitatortest"
	"github.com/x402gate/x402gate/internal/testenv"
)

// permit2Env is a testEnv whose chain has Permit2 and the x402 proxies at their canonical
// addresses, and a plain ERC-20 without EIP-3009 ("DAI", 18 decimals) that its facilitator
// settles through Permit2; the payer holds 1 DAI and has not approved Permit2.
func newPermit2Env(t *testing.T) (*testEnv, *testenv.PlainToken) {
	t.Helper()
	c := facilitatortest.StartChain(t)
	c.Chain.InstallPermit2(t)
	dai := c.Chain.DeployPlainToken(t, "DAI", 18)
	e := c.Service(t, func(cfg *facilitator.Config) {
		for i := range cfg.Networks {
			cfg.Networks[i].Permit2Tokens = []string{dai.Address.Hex()}
		}
	})
	v := &testEnv{chain: c.Chain, token: c.Token, net: c.Network, reg: c.Registry, engine: e,
		payTo: testenv.NewAccount(t).Address, payer: c.Chain.Accounts[1]}
	dai.Mint(t, v.payer.Address, new(big.Int).Exp(big.NewInt(10), big.NewInt(18), nil))
	return v, dai
}

// permit2Route charges 0.01 DAI by Permit2.
func (v *testEnv) permit2Route(dai *testenv.PlainToken) Config {
	cfg := v.config()
	cfg.Price, cfg.Transfer = "0.01 DAI", TransferPermit2
	cfg.Asset = AssetConfig{Address: dai.Address.Hex(), Decimals: int(dai.Decimals), Symbol: dai.Symbol}
	return cfg
}

// TestPaywallPaysByPermit2InChromium drives the paywall's own script in Chromium on a route
// of a plain ERC-20 by Permit2: the wallet has not approved Permit2, so the page reads the
// allowance, sends the one-time approval and waits for its receipt, then signs the Permit2
// PermitWitnessTransferFrom; the payment settles through the x402 exact proxy and the page
// shows the paid content. The payee gets exactly the price. A second payment needs no
// approval: the page reads the allowance and signs at once.
func TestPaywallPaysByPermit2InChromium(t *testing.T) {
	env, dai := newPermit2Env(t)
	price := new(big.Int).Exp(big.NewInt(10), big.NewInt(16), nil) // 0.01 DAI
	cfg := env.permit2Route(dai)

	run, up := payInChromium(t, env, cfg, walletOn(env, env.payer))
	if run.Verdict != paidPage || up != 1 {
		t.Fatalf("in Chromium: %s (upstream ran %d times; wallet calls %q)", run.Verdict, up, run.Calls)
	}
	calls := slices.Compact(slices.Clone(run.Calls)) // the receipt is polled until it is mined
	want := []string{"eth_requestAccounts", "eth_chainId", "eth_call", "eth_sendTransaction", "eth_getTransactionReceipt", "eth_signTypedData_v4"}
	if !slices.Equal(calls, want) {
		t.Errorf("wallet calls %q, want %q", run.Calls, want)
	}
	if got := dai.BalanceOf(t, env.payTo); got.Cmp(price) != 0 {
		t.Errorf("the payee holds %s, want exactly the price %s", got, price)
	}

	run, up = payInChromium(t, env, cfg, walletOn(env, env.payer))
	if run.Verdict != paidPage || up != 1 {
		t.Fatalf("the second payment: %s (upstream ran %d times)", run.Verdict, up)
	}
	if want := []string{"eth_requestAccounts", "eth_chainId", "eth_call", "eth_signTypedData_v4"}; !slices.Equal(run.Calls, want) {
		t.Errorf("the second payment's wallet calls %q, want %q (no second approval)", run.Calls, want)
	}
	if got := dai.BalanceOf(t, env.payTo); got.Cmp(new(big.Int).Mul(price, big.NewInt(2))) != 0 {
		t.Errorf("the payee holds %s after two payments, want %s", got, new(big.Int).Mul(price, big.NewInt(2)))
	}
}

// TestPaywallSaysUpToInChromium: the paywall of an upto route shows its price as a
// maximum, visibly, and that the answer's cost is charged.
func TestPaywallSaysUpToInChromium(t *testing.T) {
	env, dai := newPermit2Env(t)
	cfg := env.permit2Route(dai)
	cfg.Scheme, cfg.Transfer = SchemeUpto, ""
	srv := paywallServer(env.gate(t, cfg, Options{}), &upstream{}, [][2]string{{"price", "up to 0.01 DAI"}, {"metered", "at most"}})
	defer srv.Close()
	dom := runChromium(t, "--virtual-time-budget=10000", "--dump-dom", srv.URL+"/wrapper")
	if v := verdictOf(t, dom); v != "PASS" {
		t.Errorf("in Chromium: %s", v)
	}
}
