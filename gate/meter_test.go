package gate

import (
	"math/big"
	"net/http"
	"slices"
	"testing"

	"github.com/x402gate/x402gate/x402"
)

// TestMeteredAmount: the cost an upto route settles for each report an upstream can make
// (docs/gate.md#metering), on a route whose maximum is 0.01 USDC (10000 base units).
func TestMeteredAmount(t *testing.T) {
	max := big.NewInt(10_000)
	o := &option{decimals: 6, symbol: "USDC"}
	for _, tc := range []struct {
		name       string
		free       bool
		header     http.Header
		want       int64
		wantReason x402.Reason
	}{
		{"no report charges the maximum", false, http.Header{}, 10_000, ""},
		{"no report on an unmetered free route charges nothing", true, http.Header{}, 0, ""},
		{"a cost in the asset's unit", false, http.Header{"X402-Cost": {"0.0037 USDC"}}, 3700, ""},
		{"a cost in human units", false, http.Header{"X402-Cost": {"0.0037"}}, 3700, ""},
		{"a cost in dollars", false, http.Header{"X402-Cost": {"$0.0037"}}, 3700, ""},
		{"a cost in base units", false, http.Header{"X402-Cost": {"3700 base"}}, 3700, ""},
		{"a cost of zero", false, http.Header{"X402-Cost": {"0"}}, 0, ""},
		{"the maximum itself", false, http.Header{"X402-Cost": {"0.01 USDC"}}, 10_000, ""},
		{"a cost in a trailer", false, http.Header{"Trailer:X402-Cost": {"0.0037"}}, 3700, ""},
		{"Settlement-Overrides in base units", false, http.Header{"Settlement-Overrides": {`{"amount":"3700"}`}}, 3700, ""},
		{"Settlement-Overrides as a percentage", false, http.Header{"Settlement-Overrides": {`{"amount":"37%"}`}}, 3700, ""},
		{"Settlement-Overrides as a percentage with decimals", false, http.Header{"Settlement-Overrides": {`{"amount":"37.5%"}`}}, 3750, ""},
		{"Settlement-Overrides in dollars", false, http.Header{"Settlement-Overrides": {`{"amount":"$0.0037"}`}}, 3700, ""},
		{"a cost above the maximum", false, http.Header{"X402-Cost": {"0.010001 USDC"}}, 0, ReasonCostAboveMaximum},
		{"a percentage above the maximum", false, http.Header{"Settlement-Overrides": {`{"amount":"101%"}`}}, 0, ReasonCostAboveMaximum},
		{"a cost in another unit", false, http.Header{"X402-Cost": {"0.0037 DAI"}}, 0, ReasonInvalidCost},
		{"a negative cost", false, http.Header{"X402-Cost": {"-1"}}, 0, ReasonInvalidCost},
		{"a cost given twice", false, http.Header{"X402-Cost": {"0.001", "0.002"}}, 0, ReasonInvalidCost},
		{"a header and a trailer", false, http.Header{"X402-Cost": {"0.001"}, "Trailer:X402-Cost": {"0.001"}}, 0, ReasonInvalidCost},
		{"both reports", false, http.Header{"X402-Cost": {"0.001"}, "Settlement-Overrides": {`{"amount":"1000"}`}}, 0, ReasonInvalidCost},
		{"Settlement-Overrides that is not JSON", false, http.Header{"Settlement-Overrides": {"3700"}}, 0, ReasonInvalidCost},
		{"Settlement-Overrides with another field", false, http.Header{"Settlement-Overrides": {`{"amount":"1","to":"x"}`}}, 0, ReasonInvalidCost},
		{"Settlement-Overrides with a fraction of a base unit", false, http.Header{"Settlement-Overrides": {`{"amount":"1.5"}`}}, 0, ReasonInvalidCost},
		{"an empty report on an unmetered free route", true, http.Header{"X402-Cost": {""}}, 0, ReasonInvalidCost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			route := &routeConfig{unmeteredFree: tc.free}
			got, cerr := route.meteredAmount(takeCost(tc.header), o, max)
			switch {
			case tc.wantReason != "" && (cerr == nil || cerr.reason != tc.wantReason):
				t.Fatalf("amount %v, error %v; want the reason %s", got, cerr, tc.wantReason)
			case tc.wantReason == "" && cerr != nil:
				t.Fatalf("refused: %s %s", cerr.reason, cerr.msg)
			case tc.wantReason == "" && got.Cmp(big.NewInt(tc.want)) != 0:
				t.Fatalf("amount %s, want %d", got, tc.want)
			}
		})
	}
}

// TestTakeCostRemovesTheReport: the cost report never reaches the client, as a header,
// as a trailer, or in the Trailer announcement; the upstream's other headers and trailers
// stay.
func TestTakeCostRemovesTheReport(t *testing.T) {
	h := http.Header{
		"Content-Type":          {"text/event-stream"},
		"Trailer":               {"X402-Cost, Server-Timing", "Settlement-Overrides"},
		"X402-Cost":             {"1"},
		"Trailer:X402-Cost":     {"2"},
		"Settlement-Overrides":  {`{"amount":"1"}`},
		"Trailer:Server-Timing": {"db;dur=1"},
	}
	c := takeCost(h)
	if len(c.values) != 2 || len(c.overrides) != 1 {
		t.Errorf("report %+v, want two cost values and one override", c)
	}
	for _, k := range []string{"X402-Cost", "Trailer:X402-Cost", "Settlement-Overrides"} {
		if _, ok := h[k]; ok {
			t.Errorf("%s is still in the answer", k)
		}
	}
	if got := h.Values("Trailer"); !slices.Equal(got, []string{"Server-Timing"}) {
		t.Errorf("Trailer %q, want only Server-Timing", got)
	}
	if h.Get("Content-Type") == "" || h.Get("Trailer:Server-Timing") == "" {
		t.Errorf("other headers were removed: %v", h)
	}
}

// FuzzCostReport: whatever an upstream reports as its cost (X402-Cost as a header or a
// trailer, Settlement-Overrides), the gate either refuses it with a cost reason or settles
// an amount from 0 to the maximum, and the report never stays in the answer.
func FuzzCostReport(f *testing.F) {
	max := big.NewInt(10_000)
	o := &option{decimals: 6, symbol: "USDC"}
	f.Fuzz(func(t *testing.T, cost, overrides string, trailer, free bool) {
		h := http.Header{}
		if cost != "" {
			name := HeaderCost
			if trailer {
				name = http.TrailerPrefix + name
				h.Set("Trailer", HeaderCost)
			}
			h[name] = []string{cost}
		}
		if overrides != "" {
			h.Set(HeaderSettlementOverrides, overrides)
		}
		route := &routeConfig{unmeteredFree: free}
		n, cerr := route.meteredAmount(takeCost(h), o, max)
		switch {
		case cerr != nil && cerr.reason != ReasonCostAboveMaximum && cerr.reason != ReasonInvalidCost:
			t.Fatalf("refused with %s", cerr.reason)
		case cerr == nil && (n.Sign() < 0 || n.Cmp(max) > 0):
			t.Fatalf("settles %s of at most %s", n, max)
		}
		if len(h) != 0 {
			t.Fatalf("the report stayed in the answer: %v", h)
		}
	})
}
