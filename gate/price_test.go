package gate

import (
	"errors"
	"math/big"
	"strings"
	"testing"
)

func TestParsePrice(t *testing.T) {
	maxUint256 := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	cases := []struct {
		in       string
		decimals int
		symbol   string
		want     string // base units; "" means an error
		errHas   string
	}{
		{"0.01", 6, "USDC", "10000", ""},
		{"0.01 USDC", 6, "USDC", "10000", ""},
		{"0.01 usdc", 6, "USDC", "10000", ""},
		{"$0.01", 6, "USDC", "10000", ""},
		{"$0.01 USDC", 6, "USDC", "10000", ""},
		{"  1   USDC  ", 6, "USDC", "1000000", ""},
		{"1", 6, "USDC", "1000000", ""},
		{"1.5", 6, "USDC", "1500000", ""},
		{"0.000001", 6, "USDC", "1", ""},
		{"0.0000010", 6, "USDC", "1", ""}, // trailing zeros beyond decimals are exact
		{"10000 base", 6, "USDC", "10000", ""},
		{"10000 BASE", 6, "USDC", "10000", ""},
		{"1 base", 0, "", "1", ""},
		{"7", 0, "", "7", ""},
		{"007", 6, "USDC", "7000000", ""},
		{maxUint256.String() + " base", 6, "", maxUint256.String(), ""},

		{"", 6, "USDC", "", "want"},
		{"   ", 6, "USDC", "", "want"},
		{"0", 6, "USDC", "", "positive"},
		{"0.0", 6, "USDC", "", "positive"},
		{"0 base", 6, "USDC", "", "positive"},
		{"-0.01", 6, "USDC", "", "decimal number"},
		{"-5 base", 6, "USDC", "", "decimal integer"},
		{"$-1", 6, "USDC", "", "decimal number"},
		{"+1", 6, "USDC", "", "decimal number"},
		{"0.0000001", 6, "USDC", "", "more than 6 decimals"},
		{"0.5", 0, "", "", "more than 0 decimals"},
		{"1e6", 6, "USDC", "", "decimal number"},
		{"0x10", 6, "USDC", "", "decimal number"},
		{".5", 6, "USDC", "", "decimal number"},
		{"5.", 6, "USDC", "", "decimal number"},
		{"1,000", 6, "USDC", "", "decimal number"},
		{"1_000", 6, "USDC", "", "decimal number"},
		{"１", 6, "USDC", "", "decimal number"},
		{"NaN", 6, "USDC", "", "decimal number"},
		{"Inf", 6, "USDC", "", "decimal number"},
		{"$", 6, "USDC", "", "empty"},
		{"0.01 EURC", 6, "USDC", "", `unit "EURC" is not USDC or base`},
		{"0.01 USDC", 6, "", "", `unit "USDC" is not base`},
		{"0.01 USDC extra", 6, "USDC", "", "want"},
		{"1.5 base", 6, "USDC", "", "decimal integer"},
		{"$10 base", 6, "USDC", "", "human units"},
		{"0100 base", 6, "USDC", "", "leading zeros"},
		{new(big.Int).Add(maxUint256, big.NewInt(1)).String() + " base", 6, "", "", "uint256"},
		{strings.Repeat("9", 79) + " base", 6, "", "", "decimal integer"},
		{strings.Repeat("9", 75), 6, "", "", "uint256"},
		{strings.Repeat("9", 79), 6, "", "", "does not fit in uint256"},
		{strings.Repeat("9", 80), 6, "", "", "too many digits"},
		{"1", 37, "", "", "decimals 37 out of range"},
		{"1", -1, "", "", "out of range"},
	}
	for _, tc := range cases {
		got, err := ParsePrice(tc.in, tc.decimals, tc.symbol)
		if tc.want == "" {
			if err == nil {
				t.Errorf("ParsePrice(%q, %d, %q) = %s, want an error", tc.in, tc.decimals, tc.symbol, got)
				continue
			}
			if !errors.Is(err, ErrInvalidPrice) || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("ParsePrice(%q, %d, %q) error %q, want ErrInvalidPrice containing %q", tc.in, tc.decimals, tc.symbol, err, tc.errHas)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("ParsePrice(%q, %d, %q) = %v, %v; want %s", tc.in, tc.decimals, tc.symbol, got, err, tc.want)
		}
	}
}

func TestFormatAmount(t *testing.T) {
	n := func(s string) *big.Int {
		v, ok := new(big.Int).SetString(s, 10)
		if !ok {
			t.Fatalf("bad %q", s)
		}
		return v
	}
	cases := []struct {
		in       *big.Int
		decimals int
		want     string
	}{
		{nil, 6, "0"},
		{n("0"), 6, "0"},
		{n("10000"), 6, "0.01"},
		{n("1000000"), 6, "1"},
		{n("1500000"), 6, "1.5"},
		{n("1"), 6, "0.000001"},
		{n("123456789"), 6, "123.456789"},
		{n("-10000"), 6, "-0.01"},
		{n("-1"), 6, "-0.000001"},
		{n("-7"), 0, "-7"},
		{n("42"), 0, "42"},
		{n("42"), -3, "42"},
		{n("1000000000000000000"), 18, "1"},
		{n("115792089237316195423570985008687907853269984665640564039457584007913129639935"), 18,
			"115792089237316195423570985008687907853269984665640564039457.584007913129639935"},
	}
	for _, tc := range cases {
		if got := FormatAmount(tc.in, tc.decimals); got != tc.want {
			t.Errorf("FormatAmount(%v, %d) = %q, want %q", tc.in, tc.decimals, got, tc.want)
		}
	}
	// Round trip: every positive amount a human price makes formats back to it.
	for _, s := range []string{"0.01", "1", "1.5", "0.000001", "123456.789"} {
		p, err := ParsePrice(s, 6, "USDC")
		if err != nil {
			t.Fatal(err)
		}
		if got := FormatAmount(p, 6); got != s {
			t.Errorf("round trip %q -> %s -> %q", s, p, got)
		}
	}
}
