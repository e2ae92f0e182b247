package gate

import (
	"errors"
	"testing"
	"time"

	"github.com/x402gate/x402gate/x402"
)

// TestConfigValidate: a configuration file's mistakes are found without I/O, and each
// error names the option as the file spells it.
func TestConfigValidate(t *testing.T) {
	base := Config{Network: "base-sepolia", PayTo: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", Price: "0.01"}
	for _, tc := range []struct {
		name       string
		mutate     func(*Config)
		wantOption string
	}{
		{"a valid route", func(*Config) {}, ""},
		{"price is required", func(c *Config) { c.Price = "" }, "price"},
		{"pay_to is required", func(c *Config) { c.PayTo = "" }, "pay_to"},
		{"a per-request price and payee need neither, but their bounds", func(c *Config) {
			c.Price, c.PayTo, c.PerRequestPrice, c.PerRequestPayTo = "", "", true, true
			c.PriceMin, c.PriceMax, c.PayToAllowed = "0.001", "0.1", []string{"0x209693Bc6afc0C5328bA36FaF03C514EF312287C"}
		}, ""},
		{"a per-request price needs price_min", func(c *Config) { c.Price, c.PerRequestPrice = "", true }, "price"},
		{"a per-request payee needs pay_to_allowed", func(c *Config) { c.PayTo, c.PerRequestPayTo = "", true }, "pay_to"},
		{"price_max below price_min", func(c *Config) { c.PriceMin, c.PriceMax = "0.1", "0.01" }, "price_max"},
		{"price_max without price_min", func(c *Config) { c.PriceMax = "0.1" }, "price_max"},
		{"price_min in a unit that is not the asset's", func(c *Config) { c.PriceMin = "1 DAI" }, "price_min"},
		{"pay_to_allowed with a bad checksum", func(c *Config) { c.PayToAllowed = []string{"0x209693bc6afc0C5328bA36FaF03C514EF312287C"} }, "pay_to_allowed"},
		{"an unknown network", func(c *Config) { c.Network = "polygon" }, "network"},
		{"an unknown price unit", func(c *Config) { c.Price = "0.01 DAI" }, "price"},
		{"more decimals than the asset has", func(c *Config) { c.Price = "0.0000001 USDC" }, "price"},
		{"a pay_to failing its EIP-55 checksum", func(c *Config) { c.PayTo = "0x209693bc6afc0C5328bA36FaF03C514EF312287C" }, "pay_to"},
		{"the zero address", func(c *Config) { c.PayTo = "0x0000000000000000000000000000000000000000" }, "pay_to"},
		{"an asset failing its EIP-55 checksum", func(c *Config) { c.Asset.Address = "0x036cbD53842c5426634e7929541eC2318f3dCF7e" }, "asset"},
		{"paths lenient", func(c *Config) { c.Paths = PathsLenient }, ""},
		{"paths neither strict nor lenient", func(c *Config) { c.Paths = "loose" }, "paths"},
		{"transfer permit2", func(c *Config) { c.Transfer = TransferPermit2 }, ""},
		{"a transfer that is neither", func(c *Config) { c.Transfer = "permit" }, "transfer"},
		{"a plain ERC-20 by Permit2 needs no EIP-712 domain", func(c *Config) {
			c.Transfer, c.Asset = TransferPermit2, AssetConfig{Address: "0x1111111111111111111111111111111111111111", Decimals: 18, Symbol: "DAI"}
			c.Price = "0.01 DAI"
		}, ""},
		{"a plain ERC-20 by EIP-3009 needs its EIP-712 domain", func(c *Config) {
			c.Asset = AssetConfig{Address: "0x1111111111111111111111111111111111111111", Decimals: 18}
		}, "asset"},
		{"an accept block's transfer", func(c *Config) {
			c.Accepts = []AcceptConfig{{}, {Price: "0.02", Transfer: "erc20"}}
		}, "accept 2/transfer"},
		{"scheme upto", func(c *Config) { c.Scheme = SchemeUpto }, ""},
		{"scheme upto with unmetered free", func(c *Config) { c.Scheme, c.Unmetered = SchemeUpto, UnmeteredFree }, ""},
		{"scheme upto in the authorization flow", func(c *Config) { c.Scheme, c.Flow = SchemeUpto, FlowAuthorization }, ""},
		{"a scheme that is neither", func(c *Config) { c.Scheme = "escrow" }, "scheme"},
		{"scheme upto by EIP-3009", func(c *Config) { c.Scheme, c.Transfer = SchemeUpto, TransferEIP3009 }, "transfer"},
		{"scheme upto with an accept block by EIP-3009", func(c *Config) {
			c.Scheme, c.Accepts = SchemeUpto, []AcceptConfig{{}, {Price: "0.02", Transfer: TransferEIP3009}}
		}, "accept 2/transfer"},
		{"scheme upto in the upfront flow", func(c *Config) { c.Scheme, c.Flow = SchemeUpto, FlowUpfront }, "flow"},
		{"scheme upto with a pass", func(c *Config) {
			c.Scheme, c.Pass = SchemeUpto, PassConfig{Duration: time.Hour, Keys: []string{"0123456789abcdef0123456789abcdef"}}
		}, "pass"},
		{"unmetered on an exact route", func(c *Config) { c.Unmetered = UnmeteredFree }, "unmetered"},
		{"an unmetered that is neither", func(c *Config) { c.Scheme, c.Unmetered = SchemeUpto, "zero" }, "unmetered"},
		{"decimals over 36", func(c *Config) {
			c.Asset = AssetConfig{Address: "0x1111111111111111111111111111111111111111", Name: "T", Version: "1", Decimals: 37}
		}, "decimals"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mutate(&cfg)
			err := cfg.Validate(x402.NewRegistry())
			if tc.wantOption == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			ce, ok := errors.AsType[*ConfigError](err)
			if !ok || ce.Option != tc.wantOption {
				t.Fatalf("Validate() = %v, want a ConfigError of option %q", err, tc.wantOption)
			}
		})
	}
}

func TestRetryMax(t *testing.T) {
	zero, three, neg := 0, 3, -1
	for _, tc := range []struct {
		in   *int
		want int
		err  bool
	}{{nil, 0, false}, {&zero, -1, false}, {&three, 3, false}, {&neg, 0, true}} {
		got, err := RetryMax(tc.in)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("RetryMax(%v) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
