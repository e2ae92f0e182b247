package engine

import (
	"math/big"
	"strconv"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
)

// staticTuple is a call whose one argument is a tuple of address and unsigned integer
// members (a V3 exactInputSingle's params), read in place: one word per member, without
// go-ethereum's reflective unpacking, which builds a struct type's value and a big.Int per
// member (bench/engine.md#the-margin-2026-11-23-session-7). It reads what unpack would: readStaticTuple
// answers false for anything unpack might refuse or read otherwise, and the caller then
// takes the general path, so a refusal keeps its words (TestStaticTupleReadsAsUnpack).
type staticTuple struct {
	names []string // the members' names in the ABI, in order
	enc   []byte   // the arguments: 32 bytes per member
}

// readStaticTuple reads the arguments enc of m as a staticTuple, or answers false.
func readStaticTuple(m *abi.Method, enc []byte) (staticTuple, bool) {
	if len(m.Inputs) != 1 || m.Inputs[0].Type.T != abi.TupleTy {
		return staticTuple{}, false
	}
	t := &m.Inputs[0].Type
	if len(enc) != 32*len(t.TupleElems) {
		return staticTuple{}, false // short, or trailing bytes: unpack words the refusal
	}
	for i, e := range t.TupleElems {
		w := enc[32*i : 32*i+32]
		switch {
		case e.T == abi.AddressTy:
			for _, b := range w[:12] {
				if b != 0 {
					return staticTuple{}, false // a dirty address word
				}
			}
		case e.T == abi.UintTy && e.Size != 8 && e.Size != 16 && e.Size != 32 && e.Size != 64:
			// uint24, uint160, uint256...: unpack reads the whole word into a big.Int, as
			// SetBytes does, whatever the width (only the Go-sized ones are range-checked)
		default:
			return staticTuple{}, false
		}
	}
	return staticTuple{names: t.TupleRawNames, enc: enc}, true
}

// word is the word of the member name; nil when there is none.
func (s staticTuple) word(name string) []byte {
	for i, n := range s.names {
		if n == name {
			return s.enc[32*i : 32*i+32]
		}
	}
	return nil
}

// address is the address member name.
func (s staticTuple) address(name string) common.Address {
	return common.BytesToAddress(s.word(name))
}

// bigInt is the integer member name.
func (s staticTuple) bigInt(name string) *big.Int {
	return new(big.Int).SetBytes(s.word(name))
}

// decimal is the integer member name in decimal, as big.Int's String writes it; without a
// big.Int when it fits 64 bits.
func (s staticTuple) decimal(name string) string {
	w := s.word(name)
	for _, b := range w[:24] {
		if b != 0 {
			return new(big.Int).SetBytes(w).String()
		}
	}
	var v uint64
	for _, b := range w[24:] {
		v = v<<8 | uint64(b)
	}
	return strconv.FormatUint(v, 10)
}
