package evmcall

import (
	"encoding/binary"

	"github.com/ethereum/go-ethereum/accounts/abi"
)

// Canonical reports whether enc, which args.Unpack accepted, is the encoding that
// args.Pack would give for the values it holds (docs/policy.md#evm-actions: only the
// canonical encoding is read). It compares the words in place instead of packing again:
// every offset is the one the encoder writes, every address word and fixed-bytes word is
// clean, the padding of dynamic bytes is zero and nothing follows the last tail. Integer
// and bool words need no check here: Unpack reads every bit of them, so a value it
// accepted packs back to the same word (TestCanonicalMatchesRepack holds this to the
// re-pack it replaces).
func Canonical(args abi.Arguments, enc []byte) bool {
	head := 0
	for i := range args {
		head += HeadSize(&args[i].Type)
	}
	n, ok := canonSeq(len(args), func(i int) *abi.Type { return &args[i].Type }, head, enc, 0)
	return ok && n == len(enc)
}

// IsDynamic is the ABI's dynamic type: bytes, string, T[], or an array or tuple holding one.
func IsDynamic(t *abi.Type) bool {
	switch t.T {
	case abi.StringTy, abi.BytesTy, abi.SliceTy:
		return true
	case abi.ArrayTy:
		return IsDynamic(t.Elem)
	case abi.TupleTy:
		for _, e := range t.TupleElems {
			if IsDynamic(e) {
				return true
			}
		}
	}
	return false
}

// HeadSize is the bytes a type takes in its tuple's head: its whole encoding when static,
// an offset word when dynamic.
func HeadSize(t *abi.Type) int {
	if IsDynamic(t) {
		return 32
	}
	switch t.T {
	case abi.ArrayTy:
		return t.Size * HeadSize(t.Elem)
	case abi.TupleTy:
		n := 0
		for _, e := range t.TupleElems {
			n += HeadSize(e)
		}
		return n
	}
	return 32
}

// word reads the 32-byte word at at as a length or offset; false when it does not fit an
// int bounded by the buffer.
func word(b []byte, at int) (int, bool) {
	if at < 0 || at+32 > len(b) {
		return 0, false
	}
	for _, x := range b[at : at+24] {
		if x != 0 {
			return 0, false
		}
	}
	v := binary.BigEndian.Uint64(b[at+24 : at+32])
	if v > uint64(len(b)) {
		return 0, false
	}
	return int(v), true
}

// canonTuple checks the encoding of a tuple of types starting at at and returns its length.
func canonTuple(types []*abi.Type, b []byte, at int) (int, bool) {
	head := 0
	for _, t := range types {
		head += HeadSize(t)
	}
	return canonSeq(len(types), func(i int) *abi.Type { return types[i] }, head, b, at)
}

// canonSeq checks n members (member(i) is the type of the i-th) laid out as a tuple whose
// head takes head bytes, from at; it returns the length of the whole encoding.
func canonSeq(n int, member func(int) *abi.Type, head int, b []byte, at int) (int, bool) {
	if at+head > len(b) {
		return 0, false
	}
	pos, cursor := at, head
	for i := 0; i < n; i++ {
		t := member(i)
		if !IsDynamic(t) {
			if !canonStatic(t, b, pos) {
				return 0, false
			}
			pos += HeadSize(t)
			continue
		}
		off, ok := word(b, pos)
		if !ok || off != cursor {
			return 0, false
		}
		l, ok := canonDynamic(t, b, at+cursor)
		if !ok {
			return 0, false
		}
		cursor += l
		pos += 32
	}
	return cursor, true
}

// canonDynamic checks the tail of a dynamic type at at and returns its length.
func canonDynamic(t *abi.Type, b []byte, at int) (int, bool) {
	switch t.T {
	case abi.StringTy, abi.BytesTy:
		l, ok := word(b, at)
		if !ok {
			return 0, false
		}
		padded := (l + 31) / 32 * 32
		if at+32+padded > len(b) {
			return 0, false
		}
		for _, x := range b[at+32+l : at+32+padded] {
			if x != 0 {
				return 0, false
			}
		}
		return 32 + padded, true
	case abi.SliceTy:
		k, ok := word(b, at)
		if !ok || k > len(b)/32 {
			return 0, false
		}
		l, ok := canonSeq(k, func(int) *abi.Type { return t.Elem }, k*HeadSize(t.Elem), b, at+32)
		return 32 + l, ok
	case abi.ArrayTy:
		return canonSeq(t.Size, func(int) *abi.Type { return t.Elem }, t.Size*HeadSize(t.Elem), b, at)
	case abi.TupleTy:
		return canonTuple(t.TupleElems, b, at)
	}
	return 0, false
}

// canonStatic checks a static type's words at at.
func canonStatic(t *abi.Type, b []byte, at int) bool {
	if at+HeadSize(t) > len(b) {
		return false
	}
	switch t.T {
	case abi.AddressTy:
		return zero(b[at : at+12])
	case abi.FixedBytesTy, abi.FunctionTy:
		return t.Size <= 32 && zero(b[at+t.Size:at+32])
	case abi.ArrayTy:
		step := HeadSize(t.Elem)
		for i := 0; i < t.Size; i++ {
			if !canonStatic(t.Elem, b, at+i*step) {
				return false
			}
		}
		return true
	case abi.TupleTy:
		for _, e := range t.TupleElems {
			if !canonStatic(e, b, at) {
				return false
			}
			at += HeadSize(e)
		}
		return true
	}
	// Integers and bools: Unpack read every bit (see Canonical).
	return true
}

func zero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
