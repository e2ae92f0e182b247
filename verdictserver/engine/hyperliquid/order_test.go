package hyperliquid

import (
	"math/big"
	"testing"
)

// TestMarketTriggerBound: a market trigger order is bounded by the worse of the venue's 10%
// past its trigger and its own limit price.
func TestMarketTriggerBound(t *testing.T) {
	r := func(s string) *big.Rat { x, _ := new(big.Rat).SetString(s); return x }
	for _, tc := range []struct {
		buy           bool
		p, trig, want string
	}{
		{false, "89000", "90000", "81000"}, // the venue's 10% is worse than p
		{false, "80000", "90000", "80000"}, // p is worse
		{false, "0", "90000", "81000"},     // no p
		{true, "100000", "100000", "110000"},
		{true, "120000", "100000", "120000"},
		{true, "0", "100000", "110000"},
	} {
		if got := marketTriggerBound(tc.buy, r(tc.p), r(tc.trig)); got.Cmp(r(tc.want)) != 0 {
			t.Errorf("buy=%v p=%s trigger=%s: %s, want %s", tc.buy, tc.p, tc.trig, got.FloatString(2), tc.want)
		}
	}
}
