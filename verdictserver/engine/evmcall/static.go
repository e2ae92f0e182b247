package evmcall

import (
	"math/big"
	"strconv"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
)

// StaticTuple is a call whose one argument is a tuple of address and unsigned integer
// members (a V3 exactInputSingle's params), read in place: one word per member, without
// go-ethereum's reflective unpacking, which builds a struct type's value and a big.Int per
// member (bench/engine.md#the-margin-2026-11-23-session-7). It reads what Unpack would: ReadStaticTuple
// answers false for anything Unpack might refuse or read otherwise, and the caller then
// takes the general path, so a refusal keeps its words (TestStaticTupleReadsAsUnpack).
type StaticTuple struct {
	names []string // the members' names in the ABI, in order
	enc   []byte   // the arguments: 32 bytes per member
}

// ReadStaticTuple reads the arguments enc of m as a StaticTuple, or answers false.
func ReadStaticTuple(m *abi.Method, enc []byte) (StaticTuple, bool) {
	if len(m.Inputs) != 1 || m.Inputs[0].Type.T != abi.TupleTy {
		return StaticTuple{}, false
	}
	t := &m.Inputs[0].Type
	if len(enc) != 32*len(t.TupleElems) {
		return StaticTuple{}, false // short, or trailing bytes: Unpack words the refusal
	}
	for i, e := range t.TupleElems {
		w := enc[32*i : 32*i+32]
		switch {
		case e.T == abi.AddressTy:
			for _, b := range w[:12] {
				if b != 0 {
					return StaticTuple{}, false // a dirty address word
				}
			}
		case e.T == abi.UintTy && e.Size != 8 && e.Size != 16 && e.Size != 32 && e.Size != 64:
			// uint24, uint160, uint256...: Unpack reads the whole word into a big.Int, as
			// SetBytes does, whatever the width (only the Go-sized ones are range-checked)
		default:
			return StaticTuple{}, false
		}
	}
	return StaticTuple{names: t.TupleRawNames, enc: enc}, true
}

// Word is the word of the member name; nil when there is none.
func (s StaticTuple) Word(name string) []byte {
	for i, n := range s.names {
		if n == name {
			return s.enc[32*i : 32*i+32]
		}
	}
	return nil
}

// Address is the address member name.
func (s StaticTuple) Address(name string) common.Address {
	return common.BytesToAddress(s.Word(name))
}

// BigInt is the integer member name.
func (s StaticTuple) BigInt(name string) *big.Int {
	return new(big.Int).SetBytes(s.Word(name))
}

// Decimal is the integer member name in decimal, as big.Int's String writes it; without a
// big.Int when it fits 64 bits.
func (s StaticTuple) Decimal(name string) string {
	w := s.Word(name)
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
