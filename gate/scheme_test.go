package gate_test

// The scheme and transfer method a route advertises (docs/gate.md#permit2,
// docs/gate.md#metering), as a client reads them from the 402.

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/gate/gatetest"
	"github.com/x402gate/x402gate/x402"
)

const plainToken = "0x1111111111111111111111111111111111111111"

// TestRequirementsAdvertiseTheSchemeAndTransfer: each way to pay names its scheme, a
// Permit2 one extra.assetTransferMethod "permit2" (and the token's EIP-712 domain only when
// it is known), an upto one the facilitator the client binds, and a flow other than the
// reference's default, authorization, is named in extra.paymentFlow.
func TestRequirementsAdvertiseTheSchemeAndTransfer(t *testing.T) {
	usdc := map[string]any{"name": "USDC", "version": "2"}
	with := func(m map[string]any, kv ...any) map[string]any {
		out := maps.Clone(m)
		if out == nil {
			out = map[string]any{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		mutate     func(*gate.Config)
		wantScheme string
		wantExtra  []map[string]any
	}{
		{"exact by EIP-3009, settled upfront", func(*gate.Config) {}, "exact",
			[]map[string]any{with(usdc, "paymentFlow", "upfront")}},
		{"exact by EIP-3009 in the authorization flow", func(c *gate.Config) { c.Flow = gate.FlowAuthorization }, "exact",
			[]map[string]any{usdc}},
		{"exact by Permit2", func(c *gate.Config) { c.Transfer = gate.TransferPermit2 }, "exact",
			[]map[string]any{with(usdc, "assetTransferMethod", "permit2", "paymentFlow", "upfront")}},
		{"exact by Permit2 of a plain ERC-20", func(c *gate.Config) {
			c.Transfer, c.Flow, c.Price = gate.TransferPermit2, gate.FlowAuthorization, "10000 base"
			c.Asset = gate.AssetConfig{Address: plainToken}
		}, "exact", []map[string]any{{"assetTransferMethod": "permit2"}}},
		{"an accept block by Permit2 beside EIP-3009", func(c *gate.Config) {
			c.Accepts = []gate.AcceptConfig{{}, {Price: "0.02", Transfer: gate.TransferPermit2}}
		}, "exact", []map[string]any{with(usdc, "paymentFlow", "upfront"), with(usdc, "assetTransferMethod", "permit2", "paymentFlow", "upfront")}},
		{"upto", func(c *gate.Config) { c.Scheme = gate.SchemeUpto }, "upto",
			[]map[string]any{with(usdc, "assetTransferMethod", "permit2", "facilitatorAddress", gatetest.Signer)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := gate.Config{Network: "base-sepolia", PayTo: rulesPayTo, Price: "0.01"}
			tc.mutate(&cfg)
			g, err := gate.New(cfg, gate.Options{Facilitator: gatetest.NewFacilitator(x402.BaseSepolia)})
			if err != nil {
				t.Fatal(err)
			}
			offers, err := g.Offers(context.Background(), gate.Input{Resource: "https://api.example/premium"})
			if err != nil {
				t.Fatal(err)
			}
			if len(offers) != len(tc.wantExtra) {
				t.Fatalf("%d offers, want %d", len(offers), len(tc.wantExtra))
			}
			for i, o := range offers {
				v2 := o.V2()
				if v2.Scheme != tc.wantScheme || !maps.Equal(v2.Extra, tc.wantExtra[i]) {
					t.Errorf("accepts[%d] scheme %s extra %v, want %s %v", i, v2.Scheme, v2.Extra, tc.wantScheme, tc.wantExtra[i])
				}
			}
		})
	}
}

// TestUptoNeedsItsFacilitatorsAddress: an upto authorization binds the facilitator that
// may settle it, which the gate reads from /supported. A facilitator that does not name
// one, or cannot be asked, gets no request through: 502 facilitator_unavailable, and the
// gate asks again on the next request.
func TestUptoNeedsItsFacilitatorsAddress(t *testing.T) {
	cfg := gate.Config{Network: "base-sepolia", PayTo: rulesPayTo, Price: "0.01", Scheme: gate.SchemeUpto}
	for _, tc := range []struct {
		name      string
		supported func(context.Context) (x402.SupportedResponse, error)
	}{
		{"a facilitator that does not settle upto", func(context.Context) (x402.SupportedResponse, error) {
			return x402.SupportedResponse{Kinds: []x402.SupportedKind{{X402Version: 2, Scheme: "exact", Network: "eip155:84532"}}}, nil
		}},
		{"upto without an address", func(context.Context) (x402.SupportedResponse, error) {
			return x402.SupportedResponse{Kinds: []x402.SupportedKind{{X402Version: 2, Scheme: "upto", Network: "eip155:84532"}}}, nil
		}},
		{"a facilitator that cannot be asked", func(context.Context) (x402.SupportedResponse, error) {
			return x402.SupportedResponse{}, errors.New("connection refused")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRulesServer(t, cfg, gate.Options{})
			s.f.OnSupported(tc.supported)
			if err := s.g.CheckSupported(context.Background()); err == nil {
				t.Error("CheckSupported passed")
			}
			res, body := s.get(t, "/premium")
			if res.StatusCode != http.StatusBadGateway || !strings.Contains(body, "facilitator_unavailable") {
				t.Fatalf("status %d %s, want 502 facilitator_unavailable", res.StatusCode, body)
			}
			s.f.OnSupported(nil)
			if res, body = s.get(t, "/premium"); res.StatusCode != http.StatusPaymentRequired {
				t.Fatalf("once the facilitator answers: status %d %s, want 402", res.StatusCode, body)
			}
		})
	}
}

// TestPermit2AllowanceRequiredIs412: a payer that has not approved Permit2 is refused by
// verify with permit2_allowance_required, which the gate answers 412 as the reference
// servers do, with the challenge in PAYMENT-REQUIRED; nothing is settled or proxied.
func TestPermit2AllowanceRequiredIs412(t *testing.T) {
	cfg := gate.Config{Network: "base-sepolia", PayTo: rulesPayTo, Price: "0.01", Transfer: gate.TransferPermit2}
	s := newRulesServer(t, cfg, gate.Options{})
	s.f.OnVerify(func(_ context.Context, in x402.VerifyInput) (x402.VerifyResponse, error) {
		return x402.VerifyResponse{InvalidReason: "permit2_allowance_required", Payer: in.Payment.Authorization.From.Hex()}, nil
	})
	o, err := s.g.Offers(context.Background(), gate.Input{Resource: s.URL + "/premium"})
	if err != nil {
		t.Fatal(err)
	}
	name, value := pay(t, newPayer(t), x402.Version2, o[0])
	res, body := s.get(t, "/premium", name, value)
	if res.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("status %d %s, want 412", res.StatusCode, body)
	}
	pr, err := x402.DecodePaymentRequired(res.Header.Get(x402.HeaderPaymentRequired))
	if err != nil || pr.Error != "permit2_allowance_required" {
		t.Errorf("PAYMENT-REQUIRED %+v %v, want the error permit2_allowance_required", pr, err)
	}
	if n := s.f.Count(gatetest.MethodSettle); n != 0 || s.calls.Load() != 0 {
		t.Errorf("settled %d times, upstream called %d times; want neither", n, s.calls.Load())
	}
}
