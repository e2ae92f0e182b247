package x402

import (
	"errors"
	"math/big"
	"strings"
	"testing"
)

func TestParseAmount(t *testing.T) {
	for _, tc := range []struct {
		human    string
		decimals int
		want     string // "" = refused
	}{
		{"0.01", 6, "10000"},
		{"1", 6, "1000000"},
		{"1.5", 6, "1500000"},
		{"0.000001", 6, "1"},
		{"0.0100", 2, "1"},
		{"10", 0, "10"},
		{"0", 6, "0"},
		{"00.5", 1, "5"},
		{"0.0000001", 6, ""},
		{"1.5", 0, ""},
		{"-1", 6, ""},
		{"+1", 6, ""},
		{"1e3", 6, ""},
		{"1,000", 6, ""},
		{"$0.01", 6, ""},
		{" 1", 6, ""},
		{"1.", 6, ""},
		{".5", 6, ""},
		{"1.2.3", 6, ""},
		{"", 6, ""},
		{"abc", 6, ""},
		{"1", -1, ""},
		{"1", 37, ""},
		{strings.Repeat("9", 101), 0, ""},
		{strings.Repeat("9", 80), 0, ""},
	} {
		t.Run(tc.human, func(t *testing.T) {
			got, err := ParseAmount(tc.human, tc.decimals)
			if tc.want == "" {
				if err == nil || !errors.Is(err, ErrAmount) {
					t.Fatalf("ParseAmount(%q, %d) = %v, %v; want ErrAmount", tc.human, tc.decimals, got, err)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("ParseAmount(%q, %d) = %v, %v; want %s", tc.human, tc.decimals, got, err, tc.want)
			}
		})
	}
}

func TestFormatAmount(t *testing.T) {
	for _, tc := range []struct {
		base     *big.Int
		decimals int
		want     string
	}{
		{big.NewInt(10000), 6, "0.01"},
		{big.NewInt(1000000), 6, "1"},
		{big.NewInt(1500000), 6, "1.5"},
		{big.NewInt(1), 6, "0.000001"},
		{big.NewInt(0), 6, "0"},
		{big.NewInt(-10000), 6, "-0.01"},
		{big.NewInt(42), 0, "42"},
		{nil, 6, "0"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := FormatAmount(tc.base, tc.decimals); got != tc.want {
				t.Fatalf("FormatAmount(%v, %d) = %q", tc.base, tc.decimals, got)
			}
			if tc.base != nil && tc.base.Sign() >= 0 {
				back, err := ParseAmount(tc.want, tc.decimals)
				if err != nil || back.Cmp(tc.base) != 0 {
					t.Fatalf("round trip %q -> %v, %v", tc.want, back, err)
				}
			}
		})
	}
}
