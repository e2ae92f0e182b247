package engine

import (
	"math/big"
	"math/bits"
)

// Exact shortcuts for the rationals of the trading checks, which math/big computes through
// temporary numbers on the heap. Each gives exactly what the math/big call it replaces gives
// (ratfast_test.go compares them); outside its fast path it makes that call.

// maxExactFloat is 2^53: every integer of magnitude below it is a float64 exactly.
const maxExactFloat = 1 << 53

// ratFloat64 is r.Float64()'s float. When the numerator and denominator are both exact
// float64s, their IEEE quotient is the nearest float64 to r (rounded half to even), which
// is what Float64 returns.
func ratFloat64(r *big.Rat) float64 {
	n, d := r.Num(), r.Denom()
	if n.IsInt64() && d.IsUint64() {
		nv, dv := n.Int64(), d.Uint64()
		if nv > -maxExactFloat && nv < maxExactFloat && dv < maxExactFloat {
			return float64(nv) / float64(dv)
		}
	}
	f, _ := r.Float64()
	return f
}

// ratCmpInt is r.Cmp(new(big.Rat).SetInt64(m)) for m ≥ 0: the sign of num − m × den,
// with the product in 128 bits when num and den fit in 64.
func ratCmpInt(r *big.Rat, m int64) int {
	n, d := r.Num(), r.Denom()
	if m >= 0 && n.IsUint64() && d.IsUint64() {
		hi, lo := bits.Mul64(uint64(m), d.Uint64())
		nv := n.Uint64()
		switch {
		case hi > 0 || lo > nv:
			return -1
		case lo < nv:
			return 1
		}
		return 0
	}
	return r.Cmp(new(big.Rat).SetInt64(m))
}
