package x402

import (
	"strings"
	"testing"
)

func paymentRequiredMap() map[string]any {
	return map[string]any{
		"x402Version": 2, "error": "Payment required",
		"resource":   map[string]any{"url": "https://api.example.com/premium", "mimeType": "application/json"},
		"accepts":    []any{acceptedMap()},
		"extensions": map[string]any{},
	}
}

func TestDecodePaymentRequired(t *testing.T) {
	good := paymentRequiredMap()
	solana := map[string]any{"scheme": "exact", "network": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", "amount": "10000",
		"asset": "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "payTo": "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin", "maxTimeoutSeconds": 60}
	for _, tc := range []struct {
		name   string
		value  string
		reason Reason
		field  string
	}{
		{"SDK answer decodes", b64(mustJSON(t, good)), "", ""},
		{"entries of other chains are kept", b64(mustJSON(t, with(good, "accepts", []any{acceptedMap(), solana}))), "", ""},
		{"error may be null", b64(mustJSON(t, with(good, "error", nil))), "", ""},
		{"oversize", strings.Repeat("A", MaxHeaderBytes+4), ReasonInvalidRequirements, ""},
		{"URL-safe base64", "eyJ4-_==", ReasonInvalidRequirements, ""},
		{"bad JSON", b64([]byte("{")), ReasonInvalidRequirements, ""},
		{"version 1", b64(mustJSON(t, with(good, "x402Version", 1))), ReasonInvalidVersion, "x402Version"},
		{"unknown top-level field", b64(mustJSON(t, with(good, "payer", "x"))), ReasonInvalidRequirements, "payer"},
		{"resource missing", b64(mustJSON(t, with(good, "resource", del{}))), ReasonInvalidRequirements, "resource"},
		{"accepts empty", b64(mustJSON(t, with(good, "accepts", []any{}))), ReasonInvalidRequirements, "accepts"},
		{"accepts not an array", b64(mustJSON(t, with(good, "accepts", map[string]any{}))), ReasonInvalidRequirements, "accepts"},
		{"entry with a v1 network name", b64(mustJSON(t, with(good, "accepts", []any{with(acceptedMap(), "network", "base")}))), ReasonInvalidNetwork, "accepts[0].network"},
		{"EVM entry with a short payTo", b64(mustJSON(t, with(good, "accepts", []any{with(acceptedMap(), "payTo", "0x12")}))), ReasonInvalidRequirements, "accepts[0].payTo"},
		{"EVM entry with a decimal amount", b64(mustJSON(t, with(good, "accepts", []any{with(acceptedMap(), "amount", "0.01")}))), ReasonInvalidRequirements, "accepts[0].amount"},
		{"entry without maxTimeoutSeconds", b64(mustJSON(t, with(good, "accepts", []any{with(acceptedMap(), "maxTimeoutSeconds", del{})}))), ReasonInvalidRequirements, "accepts[0].maxTimeoutSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, err := DecodePaymentRequired(tc.value)
			if tc.reason != "" {
				wantReason(t, err, tc.reason, tc.field)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pr.X402Version != 2 || pr.Resource.URL == "" || len(pr.Accepts) == 0 {
				t.Fatalf("decoded %+v", pr)
			}
			again, err := EncodePaymentRequired(pr)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodePaymentRequired(again); err != nil {
				t.Fatalf("re-encoded answer does not decode: %v", err)
			}
		})
	}
}

func TestDecodeSettleResponse(t *testing.T) {
	tx := "0x" + strings.Repeat("ab", 32)
	ok := map[string]any{"success": true, "transaction": tx, "network": "base-sepolia", "payer": anvilAddr.Hex()}
	fail := map[string]any{"success": false, "errorReason": "insufficient_funds", "transaction": "", "network": "eip155:84532"}
	for _, tc := range []struct {
		name   string
		json   map[string]any
		reason Reason
		field  string
	}{
		{"v1 success header", ok, "", ""},
		{"v2 failure header", fail, "", ""},
		{"pending with a hash", with(with(fail, "errorReason", "settlement_pending"), "transaction", tx), "", ""},
		{"txHash and amount beside transaction", with(with(ok, "txHash", tx), "amount", "10000"), "", ""},
		{"2.27 extensions", with(ok, "extensions", map[string]any{}), "", ""},
		{"success without transaction", with(ok, "transaction", ""), ReasonUnexpectedSettle, "transaction"},
		{"an upto settlement of 0 without transaction", with(with(ok, "transaction", ""), "amount", "0"), "", ""},
		{"success without transaction of another amount", with(with(ok, "transaction", ""), "amount", "1"), ReasonUnexpectedSettle, "transaction"},
		{"transaction missing (txHash only)", with(with(ok, "transaction", del{}), "txHash", tx), ReasonUnexpectedSettle, "transaction"},
		{"transaction not a hash", with(ok, "transaction", "0x12"), ReasonUnexpectedSettle, "transaction"},
		{"success a string", with(ok, "success", "true"), ReasonUnexpectedSettle, "success"},
		{"network missing", with(ok, "network", del{}), ReasonUnexpectedSettle, "network"},
		{"payer not an address", with(ok, "payer", "bob"), ReasonUnexpectedSettle, "payer"},
		{"amount negative", with(ok, "amount", "-1"), ReasonUnexpectedSettle, "amount"},
		{"unknown field", with(ok, "hash", tx), ReasonUnexpectedSettle, "hash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sr, err := DecodeSettleResponse(b64(mustJSON(t, tc.json)))
			if tc.reason != "" {
				wantReason(t, err, tc.reason, tc.field)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			again, err := EncodeSettleResponse(sr)
			if err != nil {
				t.Fatal(err)
			}
			sr2, err := DecodeSettleResponse(again)
			if err != nil || *sr2 != *sr {
				t.Fatalf("round trip: %+v, %v", sr2, err)
			}
		})
	}
	for _, v := range []string{"", strings.Repeat("A", MaxHeaderBytes+4), "e30"} {
		if _, err := DecodeSettleResponse(v); ReasonOf(err) != ReasonUnexpectedSettle {
			t.Fatalf("DecodeSettleResponse(%.10q) = %v", v, err)
		}
	}
}
