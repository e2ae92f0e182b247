package x402

import (
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
)

// reqV1Map is a v1 accepts entry as x402-express 1.2.0 builds it.
func reqV1Map() map[string]any {
	return map[string]any{
		"scheme": "exact", "network": "base-sepolia", "maxAmountRequired": "10000",
		"resource": "https://api.example.com/premium", "description": "", "mimeType": "",
		"payTo": payTo.Hex(), "maxTimeoutSeconds": 60, "asset": BaseSepolia.USDC.Address.Hex(),
		"extra": map[string]any{"name": "USDC", "version": "2"},
	}
}

func TestDecodeRequirementsJSON(t *testing.T) {
	v1, v2 := reqV1Map(), acceptedMap()
	for _, tc := range []struct {
		name    string
		version int
		json    map[string]any
		reason  Reason // "" = decodes
		field   string
	}{
		{"v1 entry of x402-express decodes", 1, v1, "", ""},
		{"v1 mimeType may be absent (@x402/core)", 1, with(v1, "mimeType", del{}), "", ""},
		{"v1 outputSchema may be null", 1, with(v1, "outputSchema", nil), "", ""},
		{"v1 unknown fields are ignored", 1, with(v1, "future", true), "", ""},
		{"v2 entry decodes", 2, v2, "", ""},
		{"v2 extra may be absent", 2, with(v2, "extra", del{}), "", ""},
		{"v1 shape read as v2 is refused", 2, v1, ReasonInvalidNetwork, "network"},
		{"v2 shape read as v1 is refused", 1, v2, ReasonInvalidNetwork, "network"},
		{"wrong scheme", 1, with(v1, "scheme", "upto"), ReasonInvalidScheme, "scheme"},
		{"unknown network", 2, with(v2, "network", "eip155:1"), ReasonInvalidNetwork, "network"},
		{"amount not an integer", 2, with(v2, "amount", "1.0"), ReasonInvalidRequirements, "amount"},
		{"amount missing", 1, with(v1, "maxAmountRequired", del{}), ReasonInvalidRequirements, "maxAmountRequired"},
		{"payTo not an address", 2, with(v2, "payTo", "0xabc"), ReasonInvalidRequirements, "payTo"},
		{"asset an ISO-4217 code", 2, with(v2, "asset", "USD"), ReasonInvalidRequirements, "asset"},
		{"maxTimeoutSeconds zero", 2, with(v2, "maxTimeoutSeconds", 0), ReasonInvalidRequirements, "maxTimeoutSeconds"},
		{"maxTimeoutSeconds fractional", 2, with(v2, "maxTimeoutSeconds", 1.5), ReasonInvalidRequirements, "maxTimeoutSeconds"},
		{"maxTimeoutSeconds as a string", 2, with(v2, "maxTimeoutSeconds", "60"), ReasonInvalidRequirements, "maxTimeoutSeconds"},
		{"extra not an object", 2, with(v2, "extra", "x"), ReasonInvalidRequirements, "extra"},
		{"v1 resource empty", 1, with(v1, "resource", ""), ReasonInvalidRequirements, "resource"},
		{"v1 description missing", 1, with(v1, "description", del{}), ReasonInvalidRequirements, "description"},
		{"v1 outputSchema not an object", 1, with(v1, "outputSchema", []any{}), ReasonInvalidRequirements, "outputSchema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := DecodeRequirementsJSON(mustJSON(t, tc.json), tc.version, nil)
			if tc.reason != "" {
				wantReason(t, err, tc.reason, tc.field)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Network != "eip155:84532" || r.Amount.Int64() != 10000 || r.PayTo != payTo || r.Asset != BaseSepolia.USDC.Address {
				t.Fatalf("decoded %+v", r)
			}
		})
	}
	for _, tc := range []struct {
		name    string
		raw     []byte
		version int
		reason  Reason
	}{
		{"oversize", []byte(strings.Repeat(" ", MaxRequirementsJSONBytes+1)), 1, ReasonInvalidRequirements},
		{"version 3", mustJSON(t, v2), 3, ReasonInvalidVersion},
		{"not an object", []byte(`"x"`), 2, ReasonInvalidRequirements},
		{"not UTF-8", []byte("{\"a\":\"\xff\"}"), 2, ReasonInvalidRequirements},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRequirementsJSON(tc.raw, tc.version, nil)
			wantReason(t, err, tc.reason, "")
		})
	}
}

func TestRequirementsV1PassesTheV1ClientSchema(t *testing.T) {
	raw := with(reqV1Map(), "payTo", strings.ToLower(payTo.Hex()))
	raw = with(raw, "mimeType", del{})
	r, err := DecodeRequirementsJSON(mustJSON(t, raw), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := r.V1(nil)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(mustJSON(t, v1), &m); err != nil {
		t.Fatal(err)
	}
	if m["network"] != "base-sepolia" || m["maxAmountRequired"] != "10000" || m["payTo"] != payTo.Hex() || m["asset"] != "0x036CbD53842c5426634e7929541eC2318f3dCF7e" {
		t.Fatalf("v1 = %v", m)
	}
	if mt, ok := m["mimeType"].(string); !ok || mt != "" {
		t.Fatalf("mimeType = %#v, want a string", m["mimeType"])
	}
	if _, ok := m["outputSchema"]; ok {
		t.Fatal("outputSchema present though none was given")
	}
	// v1 -> normal -> v2 -> normal keeps everything v2 carries.
	r2, err := DecodeRequirementsJSON(mustJSON(t, r.V2()), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Network != r.Network || r2.Amount.Cmp(r.Amount) != 0 || r2.PayTo != r.PayTo || r2.Asset != r.Asset || r2.MaxTimeoutSeconds != r.MaxTimeoutSeconds {
		t.Fatalf("v2 round trip: %+v vs %+v", r2, r)
	}
	if n, v, ok := r2.Domain(); !ok || n != "USDC" || v != "2" {
		t.Fatalf("domain = %q %q %v", n, v, ok)
	}
}

func TestRequirementsDomain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra map[string]any
		ok    bool
	}{
		{"name and version present", map[string]any{"name": "USD Coin", "version": "2"}, true},
		{"no extra", nil, false},
		{"version missing", map[string]any{"name": "USDC"}, false},
		{"version not a string", map[string]any{"name": "USDC", "version": json.Number("2")}, false},
		{"name empty", map[string]any{"name": "", "version": "2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, ok := (&Requirements{Extra: tc.extra}).Domain(); ok != tc.ok {
				t.Fatalf("ok = %v", ok)
			}
		})
	}
}

func TestRequirementsMatches(t *testing.T) {
	req := &Requirements{Scheme: "exact", Network: "eip155:84532", Amount: big.NewInt(10000), Asset: BaseSepolia.USDC.Address, PayTo: payTo, MaxTimeoutSeconds: 60}
	p1, err := DecodePaymentHeader(HeaderPayment, b64(mustJSON(t, v1Map(t))), nil)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := DecodePaymentHeader(HeaderPaymentSignature, b64(mustJSON(t, v2Map(t))), nil)
	if err != nil {
		t.Fatal(err)
	}
	mod := func(p *Payment, f func(*Payment)) *Payment {
		c := *p
		if p.Accepted != nil {
			acc := *p.Accepted
			c.Accepted = &acc
		}
		f(&c)
		return &c
	}
	other := common.HexToAddress("0x0000000000000000000000000000000000000001")
	for _, tc := range []struct {
		name   string
		p      *Payment
		reason Reason
	}{
		{"v1 payment of the exact amount matches", p1, ""},
		{"v2 payment of the exact amount matches", p2, ""},
		{"scheme differs", mod(p1, func(p *Payment) { p.Scheme = "upto" }), ReasonInvalidScheme},
		{"network differs", mod(p1, func(p *Payment) { p.Network = "eip155:8453" }), ReasonNetworkMismatch},
		{"accepted asset differs", mod(p2, func(p *Payment) { p.Accepted.Asset = other }), ReasonAssetMismatch},
		{"accepted payTo differs", mod(p2, func(p *Payment) { p.Accepted.PayTo = other }), ReasonRecipientMismatch},
		{"accepted amount differs", mod(p2, func(p *Payment) { p.Accepted.Amount = big.NewInt(1) }), ReasonValueMismatch},
		{"authorization to differs", mod(p1, func(p *Payment) { p.Authorization.To = other }), ReasonRecipientMismatch},
		{"overpayment is not exact", mod(p1, func(p *Payment) { p.Authorization.Value = big.NewInt(10001) }), ReasonValueMismatch},
		{"underpayment", mod(p1, func(p *Payment) { p.Authorization.Value = big.NewInt(9999) }), ReasonValueMismatch},
		{"no payment", nil, ReasonInvalidPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := req.Matches(tc.p)
			if tc.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var me *MismatchError
			if !errors.As(err, &me) || ReasonOf(err) != tc.reason {
				t.Fatalf("err = %v, want reason %s", err, tc.reason)
			}
		})
	}
}
