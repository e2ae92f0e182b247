package uniswap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"

	"github.com/x402gate/x402gate/verdictserver/engine/erc20"
	"github.com/x402gate/x402gate/verdictserver/engine/evmcall"
)

// unpackRepack is the strict unpack that canonical replaced: unpack, then pack the values
// again and require the same bytes.
func unpackRepack(args abi.Arguments, enc []byte) ([]any, error) {
	vals, err := evmcall.UnpackAny(args, enc)
	if err != nil {
		return nil, err
	}
	again, err := args.Pack(vals...)
	if err != nil || !bytes.Equal(again, enc) {
		return nil, fmt.Errorf("not the canonical abi encoding")
	}
	return vals, nil
}

// everyArgumentList is every argument list the decoders unpack.
func everyArgumentList() map[string]abi.Arguments {
	all := map[string]abi.Arguments{}
	for _, a := range []*evmcall.ABI{erc20.ABI, RouterABI} {
		for _, m := range a.Methods {
			all[m.Sig] = m.Inputs
		}
	}
	for k, v := range urIn {
		all["ur."+k] = v
	}
	for k, v := range v4Plain {
		all[fmt.Sprintf("v4.%#x", k)] = v
	}
	for k, v := range v4Hop {
		all[fmt.Sprintf("v4hop.%#x", k)] = v
	}
	return all
}

// TestCanonicalMatchesRepack: for every argument list the decoders read, canonical encodings
// of random values and random corruptions of them (bytes, offset and length words, a word
// more or less) get the same answer from unpack as from the re-pack it replaced.
func TestCanonicalMatchesRepack(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	for name, args := range everyArgumentList() {
		canon, refused := 0, 0
		for i := 0; i < 300; i++ {
			enc := randomEncoding(rng, args)
			if _, err := unpackRepack(args, enc); err != nil {
				t.Fatalf("%s: the generated encoding is not canonical (%v): %x", name, err, enc)
			}
			for j := 0; j < 8; j++ {
				m := mutate(rng, enc)
				_, want := unpackRepack(args, m)
				_, got := evmcall.Unpack(args, m)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s: unpack says %v, the re-pack %v, for %x", name, got, want, m)
				}
				if want == nil {
					canon++
				} else {
					refused++
				}
			}
		}
		if refused == 0 {
			t.Errorf("%s: no corruption was refused: the test does not test", name)
		}
	}
}

// mutate corrupts a copy of enc in one of the ways a canonical check must notice, or not.
func mutate(rng *rand.Rand, enc []byte) []byte {
	m := bytes.Clone(enc)
	words := len(m) / 32
	switch rng.IntN(7) {
	case 0:
		if len(m) > 0 {
			m[rng.IntN(len(m))] ^= byte(1 + rng.IntN(255))
		}
	case 1: // an offset or length one word off, or pointing elsewhere
		if words > 0 {
			w := rng.IntN(words) * 32
			v := binary.BigEndian.Uint64(m[w+24 : w+32])
			binary.BigEndian.PutUint64(m[w+24:w+32], v+uint64(rng.IntN(5))*32-64)
		}
	case 2:
		m = append(m, make([]byte, 32)...)
	case 3:
		if len(m) >= 32 {
			m = m[:len(m)-32]
		}
	case 4: // a dirty high byte
		if words > 0 {
			m[rng.IntN(words)*32] = 0x80
		}
	case 5: // a dirty low byte (padding of bytes, a fixed-bytes tail)
		if words > 0 {
			m[rng.IntN(words)*32+31] ^= 1
		}
	case 6:
		m = append(m, byte(rng.IntN(256)))
	}
	return m
}

// randomEncoding encodes random values of args canonically, without go-ethereum's packer.
func randomEncoding(rng *rand.Rand, args abi.Arguments) []byte {
	types := make([]*abi.Type, len(args))
	for i := range args {
		types[i] = &args[i].Type
	}
	return encodeSeq(rng, types)
}

func encodeSeq(rng *rand.Rand, types []*abi.Type) []byte {
	var head, tail []byte
	size := 0
	for _, t := range types {
		size += evmcall.HeadSize(t)
	}
	for _, t := range types {
		if evmcall.IsDynamic(t) {
			head = append(head, uintWord(uint64(size+len(tail)))...)
			tail = append(tail, encodeValue(rng, t)...)
			continue
		}
		head = append(head, encodeValue(rng, t)...)
	}
	return append(head, tail...)
}

func uintWord(v uint64) []byte {
	w := make([]byte, 32)
	binary.BigEndian.PutUint64(w[24:], v)
	return w
}

func encodeValue(rng *rand.Rand, t *abi.Type) []byte {
	w := make([]byte, 32)
	switch t.T {
	case abi.UintTy:
		switch {
		case t.Size <= 64:
			binary.BigEndian.PutUint64(w[24:], rng.Uint64()>>(64-t.Size))
		case rng.IntN(4) == 0:
			for i := range w {
				w[i] = byte(rng.Uint32())
			}
		default:
			binary.BigEndian.PutUint64(w[24:], rng.Uint64())
		}
	case abi.IntTy:
		v := int64(rng.Uint64()) >> (64 - min(t.Size, 64))
		binary.BigEndian.PutUint64(w[24:], uint64(v))
		if v < 0 {
			for i := 0; i < 24; i++ {
				w[i] = 0xff
			}
		}
	case abi.BoolTy:
		w[31] = byte(rng.IntN(2))
	case abi.AddressTy:
		for i := 12; i < 32; i++ {
			w[i] = byte(rng.Uint32())
		}
	case abi.FixedBytesTy:
		for i := 0; i < t.Size; i++ {
			w[i] = byte(rng.Uint32())
		}
	case abi.StringTy, abi.BytesTy:
		n := rng.IntN(70)
		out := uintWord(uint64(n))
		data := make([]byte, (n+31)/32*32)
		for i := 0; i < n; i++ {
			data[i] = byte(rng.Uint32())
		}
		return append(out, data...)
	case abi.SliceTy:
		n := rng.IntN(4)
		elems := make([]*abi.Type, n)
		for i := range elems {
			elems[i] = t.Elem
		}
		return append(uintWord(uint64(n)), encodeSeq(rng, elems)...)
	case abi.ArrayTy:
		elems := make([]*abi.Type, t.Size)
		for i := range elems {
			elems[i] = t.Elem
		}
		return encodeSeq(rng, elems)
	case abi.TupleTy:
		return encodeSeq(rng, t.TupleElems)
	default:
		panic("encodeValue: type " + t.String())
	}
	return w
}

// FuzzCanonicalMatchesRepack: for any bytes read as the arguments of any list the decoders
// read, unpack answers as the re-pack it replaced.
func FuzzCanonicalMatchesRepack(f *testing.F) {
	lists := everyArgumentList()
	names := slices.Sorted(maps.Keys(lists))
	rng := rand.New(rand.NewPCG(1, 2))
	for i, n := range names {
		f.Add(randomEncoding(rng, lists[n]), uint16(i))
	}
	f.Fuzz(func(t *testing.T, enc []byte, which uint16) {
		args := lists[names[int(which)%len(names)]]
		_, want := unpackRepack(args, enc)
		_, got := evmcall.Unpack(args, enc)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("unpack says %v, the re-pack %v, for %x", got, want, enc)
		}
	})
}
