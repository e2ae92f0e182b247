package gate

import (
	"errors"
	"math/big"
	"net/http"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// twoChains is the test env plus a second anvil (chain id 8453, known as base) with its
// own token, served by the same engine: a route that accepts USDC on either.
type twoChains struct {
	*testEnv
	chain2 *testenv.Chain
	token2 *testenv.Token
}

func newTwoChains(t *testing.T) *twoChains {
	t.Helper()
	chain2, token2 := testenv.StartChainWithToken(t, testenv.WithChainID(8453))
	net2 := x402.Network{
		Name: x402.Base.Name, CAIP2: x402.Base.CAIP2, ChainID: new(big.Int).Set(chain2.ChainID),
		USDC: x402.Asset{Address: token2.Address, Name: token2.Name, Version: token2.Version, Decimals: 6, Symbol: "USDC"},
	}
	v := newTestEnvWith(t, func(c *facilitator.Config) {
		c.Networks = append(c.Networks, facilitator.NetworkOf(net2, chain2.RPCURL))
	})
	if err := v.reg.Add(net2); err != nil {
		t.Fatal(err)
	}
	return &twoChains{testEnv: v, chain2: chain2, token2: token2}
}

// signOffer signs a payment of the i-th accepts entry of c with tok, in version, with
// extensions (v2 only).
func signOffer(t *testing.T, tok *testenv.Token, version int, payer testenv.Account, c challengeOf, i int, ext map[string]any) (string, string) {
	t.Helper()
	acc := c.v2.Accepts[i]
	amount, _ := new(big.Int).SetString(acc.Amount, 10)
	a := x402.Authorization(tok.NewAuthorization(t, payer.Address, common.HexToAddress(acc.PayTo), amount))
	sig := tok.SignAuthorization(t, payer.Key, testenv.Authorization(a))
	payload := x402.ExactEVMPayload{Signature: hexutil.Encode(sig), Authorization: a.JSON()}
	var name string
	var body any
	if version == x402.Version1 {
		name, body = x402.HeaderPayment, x402.PayloadV1{X402Version: 1, Scheme: acc.Scheme, Network: c.v1.Accepts[i].Network, Payload: payload}
	} else {
		name, body = x402.HeaderPaymentSignature, x402.PayloadV2{X402Version: 2, Resource: c.v2.Resource, Accepted: acc, Payload: payload, Extensions: ext}
	}
	value, err := x402.EncodeHeader(body)
	if err != nil {
		t.Fatal(err)
	}
	return name, value
}

func TestSeveralWaysToPayEachSettlesOnItsOwnChain(t *testing.T) {
	v := newTwoChains(t)
	cfg := v.config()
	cfg.Accepts = []AcceptConfig{{}, {Network: "base", Price: "0.02 USDC"}}
	up := &upstream{}
	srv := serve(t, v.gate(t, cfg, Options{}), up)

	c := fetchChallenge(t, srv.URL+"/data")
	if len(c.v1.Accepts) != 2 || len(c.v2.Accepts) != 2 {
		t.Fatalf("the 402 lists %d v1 and %d v2 options, want 2 and 2", len(c.v1.Accepts), len(c.v2.Accepts))
	}
	for i, want := range []struct{ v1, v2, amount string }{{"base-sepolia", "eip155:84532", "10000"}, {"base", "eip155:8453", "20000"}} {
		if c.v1.Accepts[i].Network != want.v1 || c.v2.Accepts[i].Network != want.v2 || c.v2.Accepts[i].Amount != want.amount || c.v1.Accepts[i].MaxAmountRequired != want.amount {
			t.Errorf("option %d is %+v / %+v, want %s %s %s", i, c.v1.Accepts[i], c.v2.Accepts[i], want.v1, want.v2, want.amount)
		}
	}
	if c.v2.Accepts[1].Asset != v.token2.Address.Hex() {
		t.Errorf("option 2 asset %s, want the second chain's token %s", c.v2.Accepts[1].Asset, v.token2.Address.Hex())
	}

	payer := v.chain.Accounts[2]
	payer2 := v.chain2.Accounts[3]
	before1, before2 := v.token.BalanceOf(t, payer.Address), v.token2.BalanceOf(t, payer2.Address)

	// v2 on the second chain.
	name, value := signOffer(t, v.token2, x402.Version2, payer2, c, 1, nil)
	res := get(t, srv.URL+"/data", name, value)
	if body := readBody(t, res); res.StatusCode != http.StatusOK {
		t.Fatalf("v2 payment on base: status %d %s", res.StatusCode, body)
	}
	if sr := settleHeader(t, res, x402.Version2); sr.Network != "eip155:8453" {
		t.Errorf("v2 settled on %s, want eip155:8453", sr.Network)
	}
	// v1 on the first chain.
	name, value = signOffer(t, v.token, x402.Version1, payer, c, 0, nil)
	res = get(t, srv.URL+"/data", name, value)
	if body := readBody(t, res); res.StatusCode != http.StatusOK {
		t.Fatalf("v1 payment on base-sepolia: status %d %s", res.StatusCode, body)
	}
	if sr := settleHeader(t, res, x402.Version1); sr.Network != "base-sepolia" {
		t.Errorf("v1 settled on %s, want base-sepolia", sr.Network)
	}
	if got := new(big.Int).Sub(before2, v.token2.BalanceOf(t, payer2.Address)); got.Int64() != 20000 {
		t.Errorf("the second chain moved %s from its payer, want 20000", got)
	}
	if got := new(big.Int).Sub(before1, v.token.BalanceOf(t, payer.Address)); got.Int64() != 10000 {
		t.Errorf("the first chain moved %s from its payer, want 10000", got)
	}
	if got := v.token2.BalanceOf(t, v.payTo); got.Int64() != 20000 {
		t.Errorf("the payee holds %s on the second chain, want 20000", got)
	}
	if got := v.token.BalanceOf(t, v.payTo); got.Int64() != 10000 {
		t.Errorf("the payee holds %s on the first chain, want 10000", got)
	}

	// A payment that names option 2 but pays option 1's amount matches neither exactly.
	bad := c
	bad.v2 = &x402.PaymentRequiredV2{Resource: c.v2.Resource, Accepts: []x402.RequirementsV2{c.v2.Accepts[1]}}
	bad.v2.Accepts[0].Amount = "10000"
	name, value = signOffer(t, v.token2, x402.Version2, payer2, bad, 0, nil)
	res = get(t, srv.URL+"/data", name, value)
	body := readBody(t, res)
	if res.StatusCode != http.StatusPaymentRequired || !strings.Contains(string(body), "invalid_exact_evm_payload_authorization_value") && !strings.Contains(string(body), "value") {
		t.Errorf("a payment of the wrong amount: status %d %s, want a 402 naming the value", res.StatusCode, body)
	}
	if up.calls.Load() != 2 {
		t.Errorf("the upstream ran %d times, want 2", up.calls.Load())
	}
}

func TestAcceptBlocksAreCheckedEach(t *testing.T) {
	payTo := testenv.NewAccount(t).Address.Hex()
	other := testenv.NewAccount(t).Address.Hex()
	base := func() Config { return Config{Network: "base-sepolia", PayTo: payTo, Price: "0.01"} }
	cases := []struct {
		name   string
		mutate func(*Config)
		option string
	}{
		{"an unknown network in the second block names the block", func(c *Config) {
			c.Accepts = []AcceptConfig{{}, {Network: "nowhere"}}
		}, "accept 2/network"},
		{"a bad price names the block's price", func(c *Config) { c.Accepts = []AcceptConfig{{Price: "0.0000001"}} }, "accept 1/price"},
		{"a price below price_min is refused in every block", func(c *Config) {
			c.PriceMin = "0.005"
			c.Accepts = []AcceptConfig{{}, {Network: "base", Price: "0.001"}}
		}, "accept 2/price"},
		{"a payee outside pay_to_allowed is refused in every block", func(c *Config) {
			c.PayToAllowed = []string{payTo}
			c.Accepts = []AcceptConfig{{}, {Network: "base", PayTo: other}}
		}, "accept 2/pay_to"},
		{"a non-default asset needs its EIP-712 domain", func(c *Config) {
			c.Accepts = []AcceptConfig{{}, {Network: "base", Asset: AssetConfig{Address: other}}}
		}, "accept 2/asset"},
		{"two blocks a v1 payment cannot tell apart", func(c *Config) {
			c.Accepts = []AcceptConfig{{}, {Asset: AssetConfig{Address: other, Name: "T", Version: "1", Decimals: 6}}}
		}, "accept 2"},
		{"a block without a price anywhere", func(c *Config) {
			c.Price = ""
			c.Accepts = []AcceptConfig{{Network: "base", Price: "0.01"}, {}}
		}, "accept 2/price"},
		{"a placeholder price cannot go with accept blocks", func(c *Config) {
			c.Price, c.PerRequestPrice, c.PriceMin = "", true, "0.01"
			c.Accepts = []AcceptConfig{{Price: "0.01"}}
		}, "accept"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.mutate(&cfg)
			err := cfg.Validate(nil)
			ce, ok := errors.AsType[*ConfigError](err)
			if !ok || ce.Option != tc.option {
				t.Fatalf("Validate = %v, want a ConfigError of %q", err, tc.option)
			}
		})
	}
	cfg := base()
	cfg.Accepts = []AcceptConfig{{}, {Network: "base", Price: "0.02"}}
	if err := cfg.Validate(nil); err != nil {
		t.Errorf("two good blocks: %v", err)
	}
}
