package engine

import (
	mathrand "math/rand"
	"math/rand/v2"

	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/internal/intern"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
)

// TestCachesKeepCommonKeysApart: the values one evaluation asks for at once (two policy
// bounds, the dates of its sources, its addresses) land in different slots, or the caches
// would thrash and allocate on every evaluation.
func TestCachesKeepCommonKeysApart(t *testing.T) {
	slot := func(h uint64) uint64 { return h & (intern.Slots - 1) }
	bounds := []float64{1, 2, 3, 5, 10, 20, 100, 1000, 5000, 0.5, 0.3}
	seen := map[uint64]float64{}
	for _, f := range bounds {
		s := slot(intern.Mix(math.Float64bits(f)))
		if g, dup := seen[s]; dup {
			t.Errorf("bounds %v and %v share slot %d", g, f, s)
		}
		seen[s] = f
	}
	addrs := []common.Address{escrow, payee, usdc, weth, uniswap.MsgSender, uniswap.AddressThis, NativeAsset, {}}
	seenA := map[uint64]common.Address{}
	for _, a := range addrs {
		s := slot(intern.Fnv(a[:]))
		if g, dup := seenA[s]; dup {
			t.Errorf("addresses %v and %v share slot %d", g, a, s)
		}
		seenA[s] = a
	}
	// A hit allocates nothing.
	bound(3)
	intern.Checksum(usdc)
	if n := testing.AllocsPerRun(100, func() { bound(3); bound(1000); intern.Checksum(usdc); intern.Checksum(payee) }); n != 0 {
		t.Errorf("cache hits allocate %v times", n)
	}
}

// TestRatStringOfIntegers: the integer shortcut writes what FloatString(18) trimmed writes.
func TestRatStringOfIntegers(t *testing.T) {
	for _, s := range []string{"0", "1", "-1", "100", "100500", "-3000", "10", "115792089237316195423570985008687907853269984665640564039457584007913129639935", "6/3", "-40/8"} {
		r, _ := new(big.Rat).SetString(s)
		want := strings.TrimSuffix(strings.TrimRight(r.FloatString(18), "0"), ".")
		if got := ratString(r); got != want {
			t.Errorf("ratString(%s) = %v, want %s", s, got, want)
		}
	}
}

// TestRelativeBpsIsTheOldFormula: relativeBps gives the Rat that (x − y) / base × 10000
// gives step by step, for base x or y, on rationals of every shape.
func TestRelativeBpsIsTheOldFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	mrand := mathrand.New(mathrand.NewSource(7))
	rat := func() *big.Rat {
		n := new(big.Int).Rand(mrand, new(big.Int).Lsh(big.NewInt(1), uint(1+rng.IntN(200))))
		d := new(big.Int).Rand(mrand, new(big.Int).Lsh(big.NewInt(1), uint(1+rng.IntN(100))))
		d.Add(d, big.NewInt(1))
		return new(big.Rat).SetFrac(n.Add(n, big.NewInt(1)), d)
	}
	for i := 0; i < 2000; i++ {
		x, y := rat(), rat()
		if i%10 == 0 {
			y = new(big.Rat).Set(x)
		}
		for _, base := range []*big.Rat{x, y} {
			want := new(big.Rat).Sub(x, y)
			want.Quo(want, base).Mul(want, big.NewRat(10000, 1))
			if got := relativeBps(x, y, base); got.Cmp(want) != 0 || got.String() != want.String() {
				t.Fatalf("relativeBps(%s, %s, base %s) = %s, want %s", x, y, base, got, want)
			}
		}
	}
}
