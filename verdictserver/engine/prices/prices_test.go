package prices

import (
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/x402"
)

func TestUSD(t *testing.T) {
	weth := common.HexToAddress("0x4200000000000000000000000000000000000006")
	tab, err := New(time.Unix(0, 0), Entry{ChainID: 8453, Asset: weth, Symbol: "WETH", Decimals: 18, USD: "3000.5"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		chain  int64
		asset  common.Address
		amount string
		want   string // exact, as a fraction
		priced bool
	}{
		{"USDC on Base Sepolia is 1 USD a token", 84532, x402.BaseSepolia.USDC.Address, "10000", "1/100", true},
		{"USDC on Base is 1 USD a token", 8453, x402.Base.USDC.Address, "250000000", "250/1", true},
		{"a configured token", 8453, weth, "2000000000000000000", "6001/1", true},
		{"a token on a chain where it has no price", 84532, weth, "1", "", false},
		{"Base USDC's address on Base Sepolia has no price", 84532, x402.Base.USDC.Address, "1", "", false},
	} {
		amt, _ := new(big.Int).SetString(tc.amount, 10)
		got, ok := tab.USD(tc.chain, tc.asset, amt)
		if ok != tc.priced || (ok && got.String() != tc.want) {
			t.Errorf("%s: USD = %v, %v; want %s, %v", tc.name, got, ok, tc.want, tc.priced)
		}
	}
}

func TestNewRefusesBadEntries(t *testing.T) {
	a := common.HexToAddress("0x4200000000000000000000000000000000000006")
	for name, e := range map[string]Entry{
		"chain id zero":      {ChainID: 0, Asset: a, Decimals: 18, USD: "1"},
		"zero address":       {ChainID: 1, Decimals: 18, USD: "1"},
		"negative decimals":  {ChainID: 1, Asset: a, Decimals: -1, USD: "1"},
		"negative price":     {ChainID: 1, Asset: a, Decimals: 18, USD: "-1"},
		"price not a number": {ChainID: 1, Asset: a, Decimals: 18, USD: "one"},
	} {
		if _, err := New(time.Time{}, e); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestValueIsTheExactProduct: Value is amount / 10^decimals × USD, exactly, for integer and
// fractional prices and any decimals.
func TestValueIsTheExactProduct(t *testing.T) {
	for _, usd := range []string{"1", "0", "3000", "0.9998", "2/3", "123456789.123456789"} {
		for _, dec := range []int{0, 1, 6, 8, 18, 77, 80} {
			for _, amount := range []string{"0", "1", "5000000", "995000000000000000", "115792089237316195423570985008687907853269984665640564039457584007913129639935"} {
				u, _ := new(big.Rat).SetString(usd)
				a, _ := new(big.Int).SetString(amount, 10)
				want := new(big.Rat).SetFrac(a, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(dec)), nil))
				want.Mul(want, u)
				if got := (Price{USD: u, Decimals: dec}).Value(a); got.Cmp(want) != 0 || got.String() != want.String() {
					t.Errorf("%s × %s / 10^%d = %s, want %s", amount, usd, dec, got, want)
				}
			}
		}
	}
}
