package engine

import (
	"math"
	"math/big"
	"math/rand"
	"testing"
)

// TestRatShortcutsAreExact: ratFloat64 and ratCmpInt give what math/big gives, on the
// edges of their fast paths (2^53, 2^64, products past 64 bits, negatives) and on random
// fractions of every size.
func TestRatShortcutsAreExact(t *testing.T) {
	var rats []*big.Rat
	edges := []*big.Int{big.NewInt(0), big.NewInt(1), big.NewInt(3), big.NewInt(10000), big.NewInt(1 << 52), big.NewInt(1<<53 - 1), big.NewInt(1 << 53),
		big.NewInt(1<<53 + 1), big.NewInt(math.MaxInt64), new(big.Int).SetUint64(math.MaxUint64), new(big.Int).Lsh(big.NewInt(1), 70)}
	for _, n := range edges {
		for _, d := range edges[1:] {
			rats = append(rats, new(big.Rat).SetFrac(n, d), new(big.Rat).SetFrac(new(big.Int).Neg(n), d))
		}
	}
	r := rand.New(rand.NewSource(402))
	for range 20000 {
		n := new(big.Int).Rand(r, new(big.Int).Lsh(big.NewInt(1), uint(r.Intn(80)+1)))
		d := new(big.Int).Rand(r, new(big.Int).Lsh(big.NewInt(1), uint(r.Intn(80)+1)))
		d.Add(d, big.NewInt(1))
		if r.Intn(4) == 0 {
			n.Neg(n)
		}
		rats = append(rats, new(big.Rat).SetFrac(n, d))
	}
	ms := []int64{0, 1, 5, 100, 10000, 1 << 40, math.MaxInt64}
	for _, x := range rats {
		want, _ := x.Float64()
		if got := ratFloat64(x); got != want {
			t.Fatalf("ratFloat64(%s) = %v, Float64 %v", x, got, want)
		}
		for _, m := range ms {
			if got, want := ratCmpInt(x, m), x.Cmp(new(big.Rat).SetInt64(m)); got != want {
				t.Fatalf("ratCmpInt(%s, %d) = %d, Cmp %d", x, m, got, want)
			}
		}
	}
}
