package verdict

import (
	"encoding/json"
	"errors"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/x402"
)

// docs/verdict.md#paymentaction: a field copy; chainId 8453 or 84532 from the network.
func TestNewPaymentAction(t *testing.T) {
	cases := []struct {
		name    string
		network string
		chainID int64
	}{
		{"Base by CAIP-2", x402.Base.CAIP2, 8453},
		{"Base by v1 name", x402.Base.Name, 8453},
		{"Base Sepolia by CAIP-2", x402.BaseSepolia.CAIP2, 84532},
		{"Base Sepolia by v1 name", x402.BaseSepolia.Name, 84532},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, r := testPayment(tc.network)
			// lower-case addresses in, checksummed out
			p.Authorization.To = common.HexToAddress("0x209693bc6afc0c5328ba36faf03c514ef312287c")
			act, from, err := NewPaymentAction(p, r)
			if err != nil {
				t.Fatal(err)
			}
			want := PaymentAction{Protocol: "payment", Rail: "x402", ChainID: tc.chainID, PayTo: testPayee.Hex(),
				Asset: r.Asset.Hex(), Amount: "10000", Resource: testResource}
			if act != want || from != testPayer {
				t.Fatalf("action = %+v from %s; want %+v from %s", act, from.Hex(), want, testPayer.Hex())
			}
		})
	}
	t.Run("amount is the authorization's value, not the requirement's", func(t *testing.T) {
		p, r := testPayment(x402.BaseSepolia.CAIP2)
		p.Authorization.Value = new(big.Int).Lsh(big.NewInt(1), 100)
		act, _, err := NewPaymentAction(p, r)
		if err != nil || act.Amount != "1267650600228229401496703205376" {
			t.Fatalf("amount = %q, %v", act.Amount, err)
		}
	})
	t.Run("resource from the v2 payload when the requirements have none", func(t *testing.T) {
		p, r := testPayment(x402.BaseSepolia.CAIP2)
		r.Resource = x402.ResourceInfo{}
		p.Resource = &x402.ResourceInfo{URL: "https://shop.example/v2"}
		act, _, err := NewPaymentAction(p, r)
		if err != nil || act.Resource != "https://shop.example/v2" {
			t.Fatalf("resource = %q, %v", act.Resource, err)
		}
	})
	t.Run("wire form", func(t *testing.T) {
		p, r := testPayment(x402.Base.CAIP2)
		r.Resource = x402.ResourceInfo{}
		act, _, _ := NewPaymentAction(p, r)
		b, _ := json.Marshal(act)
		want := `{"protocol":"payment","rail":"x402","chainId":8453,"payTo":"` + testPayee.Hex() +
			`","asset":"` + x402.Base.USDC.Address.Hex() + `","amount":"10000"}`
		if string(b) != want {
			t.Fatalf("json = %s\nwant   %s", b, want)
		}
	})
}

func TestNewPaymentActionValidation(t *testing.T) {
	cases := []struct {
		name  string
		mut   func(p **x402.Payment, r **x402.Requirements)
		field string
	}{
		{"no payment", func(p **x402.Payment, _ **x402.Requirements) { *p = nil }, "paymentPayload"},
		{"no requirements", func(_ **x402.Payment, r **x402.Requirements) { *r = nil }, "paymentRequirements"},
		{"Ethereum mainnet", func(p **x402.Payment, r **x402.Requirements) { (*r).Network, (*p).Network = "eip155:1", "eip155:1" }, "paymentRequirements.network"},
		{"unknown network name", func(_ **x402.Payment, r **x402.Requirements) { (*r).Network = "base-goerli" }, "paymentRequirements.network"},
		{"empty network", func(_ **x402.Payment, r **x402.Requirements) { (*r).Network = "" }, "paymentRequirements.network"},
		{"payment on another network", func(p **x402.Payment, _ **x402.Requirements) { (*p).Network = x402.Base.CAIP2 }, "paymentPayload.network"},
		{"payment on an unknown network", func(p **x402.Payment, _ **x402.Requirements) { (*p).Network = "solana" }, "paymentPayload.network"},
		{"no from", func(p **x402.Payment, _ **x402.Requirements) { (*p).Authorization.From = common.Address{} }, "paymentPayload.payload.authorization.from"},
		{"no to", func(p **x402.Payment, _ **x402.Requirements) { (*p).Authorization.To = common.Address{} }, "paymentPayload.payload.authorization.to"},
		{"no value", func(p **x402.Payment, _ **x402.Requirements) { (*p).Authorization.Value = nil }, "paymentPayload.payload.authorization.value"},
		{"negative value", func(p **x402.Payment, _ **x402.Requirements) { (*p).Authorization.Value = big.NewInt(-1) }, "paymentPayload.payload.authorization.value"},
		{"no asset", func(_ **x402.Payment, r **x402.Requirements) { (*r).Asset = common.Address{} }, "paymentRequirements.asset"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, r := testPayment(x402.BaseSepolia.CAIP2)
			tc.mut(&p, &r)
			_, _, err := NewPaymentAction(p, r)
			var ie *InputError
			if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidInput) || ie.Field != tc.field {
				t.Fatalf("err = %v, want an InputError on %s", err, tc.field)
			}
		})
	}
	t.Run("payment without a network takes the requirements'", func(t *testing.T) {
		p, r := testPayment(x402.BaseSepolia.CAIP2)
		p.Network = ""
		if act, _, err := NewPaymentAction(p, r); err != nil || act.ChainID != 84532 {
			t.Fatalf("= %+v, %v", act, err)
		}
	})
}

var (
	testPayer = common.HexToAddress("0x857b06519E91e3A54538791bDbb0E22373e36b66")
	testPayee = common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
)

const testResource = "https://shop.example/report"

// testPayment is a 0.01 USDC payment from testPayer to testPayee on network (CAIP-2 or
// v1 name), with its requirements.
func testPayment(network string) (*x402.Payment, *x402.Requirements) {
	asset := x402.BaseSepolia.USDC.Address
	if network == x402.Base.CAIP2 || network == x402.Base.Name {
		asset = x402.Base.USDC.Address
	}
	r := &x402.Requirements{
		Scheme: x402.SchemeExact, Network: network, Amount: big.NewInt(10_000), Asset: asset, PayTo: testPayee,
		MaxTimeoutSeconds: 60, Resource: x402.ResourceInfo{URL: testResource},
	}
	p := &x402.Payment{
		Version: x402.Version2, Scheme: x402.SchemeExact, Network: network,
		Authorization: x402.Authorization{From: testPayer, To: testPayee, Value: big.NewInt(10_000),
			ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(1 << 40)},
	}
	return p, r
}
