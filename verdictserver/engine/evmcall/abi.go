package evmcall

import (
	"strings"

	"github.com/ethereum/go-ethereum/accounts/abi"
)

// ABI is a contract interface the decoders read calldata with, its methods indexed by
// selector once: go-ethereum's ABI.MethodById scans every method and returns a copy of the
// one found, on the heap.
type ABI struct {
	abi.ABI
	byID map[[4]byte]*abi.Method
}

// MustABI parses a built-in ABI; it panics on a bad one, or on two methods that share a
// selector.
func MustABI(s string) *ABI {
	a, err := abi.JSON(strings.NewReader(s))
	if err != nil {
		panic("evmcall: bad built-in ABI: " + err.Error())
	}
	idx := make(map[[4]byte]*abi.Method, len(a.Methods))
	for name := range a.Methods {
		m := a.Methods[name]
		if _, dup := idx[[4]byte(m.ID)]; dup {
			panic("evmcall: two built-in methods share the selector of " + m.Sig)
		}
		idx[[4]byte(m.ID)] = &m
	}
	return &ABI{ABI: a, byID: idx}
}

// MethodByID is the method with the selector sel, read only; nil when there is none.
func (a *ABI) MethodByID(sel []byte) *abi.Method { return a.byID[[4]byte(sel)] }
