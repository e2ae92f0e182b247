package verdictclient

import (
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

func TestDefaultPrompt(t *testing.T) {
	sep, base := x402.BaseSepolia.USDC.Address.Hex(), x402.Base.USDC.Address.Hex()
	other := "0x1111111111111111111111111111111111111111"
	cases := []struct {
		name string
		act  verdict.PaymentAction
		want string
	}{
		{"0.01 USDC on Base Sepolia with a resource", verdict.PaymentAction{ChainID: 84532, PayTo: "0xP", Asset: sep, Amount: "10000", Resource: "https://r.example/a"},
			"Pay 0.01 USDC to 0xP for https://r.example/a"},
		{"1 USDC on Base", verdict.PaymentAction{ChainID: 8453, PayTo: "0xP", Asset: base, Amount: "1000000"}, "Pay 1 USDC to 0xP"},
		{"one base unit", verdict.PaymentAction{ChainID: 8453, PayTo: "0xP", Asset: base, Amount: "1"}, "Pay 0.000001 USDC to 0xP"},
		{"large amount", verdict.PaymentAction{ChainID: 8453, PayTo: "0xP", Asset: base, Amount: "123456789012"}, "Pay 123456.789012 USDC to 0xP"},
		{"Base USDC address named on Base Sepolia is not USDC there", verdict.PaymentAction{ChainID: 84532, PayTo: "0xP", Asset: base, Amount: "5"},
			"Pay 5 base units of token " + base + " to 0xP"},
		{"another token", verdict.PaymentAction{ChainID: 8453, PayTo: "0xP", Asset: other, Amount: "42", Resource: "https://r.example/b"},
			"Pay 42 base units of token " + other + " to 0xP for https://r.example/b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := DefaultPrompt(tc.act, nil); got != tc.want {
				t.Fatalf("prompt = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("a registry names other tokens", func(t *testing.T) {
		reg := &x402.Registry{}
		n := x402.BaseSepolia
		n.USDC = x402.Asset{Address: common.HexToAddress(other), Name: "Test Dollar", Version: "1", Decimals: 2}
		if err := reg.Add(n); err != nil {
			t.Fatal(err)
		}
		got := DefaultPrompt(verdict.PaymentAction{ChainID: 84532, PayTo: "0xP", Asset: common.HexToAddress(other).Hex(), Amount: "250"}, reg)
		if got != "Pay 2.5 Test Dollar to 0xP" {
			t.Fatalf("prompt = %q", got)
		}
	})
}
