package verdictserver

import (
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/x402"
)

var feePayee = common.HexToAddress("0xFEEFEEFEEFEEFEEFEEFEEFEEFEEFEEFEEFEEFEE0")

func merchant(amount int64, payTo common.Address, network string) *x402.Requirements {
	return &x402.Requirements{
		Scheme: "exact", Network: network, Amount: big.NewInt(amount), Asset: testAsset, PayTo: payTo,
		MaxTimeoutSeconds: 60, Extra: map[string]any{"name": "USDC", "version": "2"},
		Resource: x402.ResourceInfo{URL: "https://api.example/weather"},
	}
}

// TestPricingQuote: the facilitator's own pricing client (verdictclient.Pricing, what
// Config.Pricing is) reads this service's quotes: a flat fee, basis points with a
// minimum, and null where no fee applies; each quote is exactly what the facilitator's
// quote check compares (scheme, network, asset, payee, amount).
func TestPricingQuote(t *testing.T) {
	sepolia := "eip155:84532"
	cases := []struct {
		name     string
		fees     *FeeConfig
		merchant *x402.Requirements
		want     int64 // 0: null
	}{
		{"flat fee", &FeeConfig{Network: "base-sepolia", Asset: testAsset.Hex(), PayTo: feePayee.Hex(), Flat: "1000"}, merchant(50_000, allowedPay, sepolia), 1000},
		{"basis points, rounded up", &FeeConfig{Network: sepolia, Asset: testAsset.Hex(), PayTo: feePayee.Hex(), BPS: 30}, merchant(50_001, allowedPay, sepolia), 151},
		{"basis points below the minimum", &FeeConfig{Network: sepolia, Asset: testAsset.Hex(), PayTo: feePayee.Hex(), BPS: 30, Min: "500"}, merchant(10_000, allowedPay, sepolia), 500},
		{"no schedule: null", nil, merchant(10_000, allowedPay, sepolia), 0},
		{"another network: null", &FeeConfig{Network: sepolia, Asset: testAsset.Hex(), PayTo: feePayee.Hex(), Flat: "1"}, merchant(10_000, allowedPay, "eip155:8453"), 0},
		{"the merchant is the fee payee: null", &FeeConfig{Network: sepolia, Asset: testAsset.Hex(), PayTo: feePayee.Hex(), Flat: "1"}, merchant(10_000, feePayee, sepolia), 0},
		{"basis points of zero: null", &FeeConfig{Network: sepolia, Asset: testAsset.Hex(), PayTo: feePayee.Hex(), BPS: 30}, merchant(0, allowedPay, sepolia), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nil, func(cfg *Config, _ *Deps) { cfg.Fee = c.fees })
			fee, err := verdictclient.Pricing(e.api.URL+"/pricing/quote", nil)(t.Context(), c.merchant)
			if err != nil {
				t.Fatal(err)
			}
			if c.want == 0 {
				if fee != nil {
					t.Fatalf("quote = %+v, want null", fee)
				}
				return
			}
			if fee == nil {
				t.Fatal("quote = null, want a fee")
			}
			if fee.Scheme != "exact" || fee.Network != sepolia || fee.Asset != testAsset || fee.PayTo != feePayee || fee.Amount.Int64() != c.want {
				t.Errorf("quote = %s %s %s %s %s, want exact %s %s %s %d", fee.Scheme, fee.Network, fee.Asset, fee.PayTo, fee.Amount, sepolia, testAsset, feePayee, c.want)
			}
			if name, version, ok := fee.Domain(); !ok || name != "USDC" || version != "2" {
				t.Errorf("quote extra = %v, want the token's EIP-712 domain", fee.Extra)
			}
		})
	}
}

// TestPricingQuoteV1AndErrors: a v1 resource gets a v1 answer; a body without a resource
// or with an invalid one is 400 naming it.
func TestPricingQuoteV1AndErrors(t *testing.T) {
	e := newEnv(t, nil, func(c *Config, _ *Deps) {
		c.Fee = &FeeConfig{Network: "base-sepolia", Asset: testAsset.Hex(), PayTo: feePayee.Hex(), Flat: "1000"}
	})
	v1, err := merchant(10_000, allowedPay, "eip155:84532").V1(nil)
	if err != nil {
		t.Fatal(err)
	}
	fee, err := verdictclient.FetchVerificationRequirements(t.Context(), e.api.URL+"/pricing/quote", v1, 0)
	if err != nil || fee == nil {
		t.Fatalf("v1 quote = %v, %v", fee, err)
	}
	if fee.Network != "base-sepolia" || fee.MaxAmountRequired != "1000" || fee.PayTo != feePayee.Hex() {
		t.Errorf("v1 quote = %+v", fee)
	}
	for _, body := range []any{`{}`, map[string]any{"resource": "x"}, map[string]any{"resource": map[string]any{"scheme": "exact"}}} {
		r := call(t, "POST", e.api.URL+"/pricing/quote", body)
		wantError(t, r, 400, codeInvalidBody)
		if r.body["field"] != "resource" {
			t.Errorf("field = %v, want resource", r.body["field"])
		}
	}
}

// TestFeeConfigValidate refuses fees the facilitator could never settle.
func TestFeeConfigValidate(t *testing.T) {
	asset, payee, zero := testAsset.Hex(), feePayee.Hex(), common.Address{}.Hex()
	for name, f := range map[string]FeeConfig{
		"no network":      {Asset: asset, PayTo: payee, Flat: "1"},
		"unknown network": {Network: "eip155:1", Asset: asset, PayTo: payee, Flat: "1"},
		"no payee":        {Network: "base-sepolia", Asset: asset, Flat: "1"},
		"the zero payee":  {Network: "base-sepolia", Asset: asset, PayTo: zero, Flat: "1"},
		"the zero asset":  {Network: "base-sepolia", Asset: zero, PayTo: payee, Flat: "1"},
		"flat and bps":    {Network: "base-sepolia", Asset: asset, PayTo: payee, Flat: "1", BPS: 3},
		"neither":         {Network: "base-sepolia", Asset: asset, PayTo: payee},
		"a flat fee of 0": {Network: "base-sepolia", Asset: asset, PayTo: payee, Flat: "0"},
		"bps over 10000":  {Network: "base-sepolia", Asset: asset, PayTo: payee, BPS: 10_001},
	} {
		if err := f.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", name)
		}
	}
	if err := (&FeeConfig{Network: "base-sepolia", PayTo: payee, BPS: 30, Min: "500"}).Validate(); err != nil {
		t.Errorf("a bps fee in the network's USDC: %v", err)
	}
}
