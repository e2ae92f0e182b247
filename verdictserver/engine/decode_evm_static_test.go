package engine

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math/big"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
)

// sameInPlace fails t unless the router call data decodes alike with the single swaps'
// params read in place and with every argument unpacked by go-ethereum: the same action,
// or the same refusal. It reports whether the call read in place.
func sameInPlace(t *testing.T, router common.Address, data []byte, value *big.Int) bool {
	t.Helper()
	fast := &uni{chainID: 84532, router: router, sender: escrow, value: value}
	slow := *fast
	slow.slowTuples = true
	a, aErr := fast.call(data, 0)
	b, bErr := slow.call(data, 0)
	if !reflect.DeepEqual(aErr, bErr) || !reflect.DeepEqual(a, b) {
		t.Fatalf("call data %x:\nin place %+v %v\nunpacked %+v %v", data, a, aErr, b, bErr)
	}
	if len(data) < 4 {
		return false
	}
	m := methodByID(&routerABI, data[:4])
	if m == nil {
		return false
	}
	_, inPlace := readStaticTuple(m, data[4:])
	return inPlace && isSingle(m.RawName)
}

// TestStaticTupleReadsAsUnpack: the single V3 swaps of both routers, with clean and dirty
// address words, integers of every width (past 2^24 and 2^160 too, which unpack reads as
// they are), and short or long encodings, read in place exactly as go-ethereum unpacks them,
// refusals included.
func TestStaticTupleReadsAsUnpack(t *testing.T) {
	sigs := []string{
		"exactInputSingle((address,address,uint24,address,uint256,uint256,uint256,uint160))",
		"exactOutputSingle((address,address,uint24,address,uint256,uint256,uint256,uint160))",
		"exactInputSingle((address,address,uint24,address,uint256,uint256,uint160))",
		"exactOutputSingle((address,address,uint24,address,uint256,uint256,uint160))",
	}
	rng := rand.New(rand.NewPCG(11, 402))
	word := func(kind int) []byte {
		w := make([]byte, 32)
		switch kind {
		case 0: // zero
		case 1:
			w[31] = byte(rng.Uint32())
		case 2:
			binary.BigEndian.PutUint64(w[24:], rng.Uint64())
		case 3:
			for i := range w[12:] {
				w[12+i] = byte(rng.Uint32())
			}
		case 4:
			for i := range w {
				w[i] = byte(rng.Uint32())
			}
		case 5:
			for i := range w {
				w[i] = 0xff
			}
		case 6: // any width from 0 to 32 bytes
			for i := 32 - rng.IntN(33); i < 32; i++ {
				w[i] = byte(rng.Uint32())
			}
		}
		return w
	}
	inPlace := 0
	for _, sig := range sigs {
		m := methodBySig(t, &routerABI, sig)
		n := len(m.Inputs[0].Type.TupleElems)
		for range 3000 {
			data := append([]byte{}, m.ID...)
			for range n {
				kind := rng.IntN(7)
				if rng.IntN(3) == 0 {
					kind = 3 // clean addresses and 160-bit integers
				}
				data = append(data, word(kind)...)
			}
			switch rng.IntN(10) {
			case 0:
				data = data[:len(data)-1-rng.IntN(40)]
			case 1:
				data = append(data, word(rng.IntN(7))...)
			}
			for _, r := range []common.Address{swapRouter, router02} {
				if sameInPlace(t, r, data, new(big.Int)) {
					inPlace++
				}
			}
		}
	}
	if inPlace < 2000 {
		t.Fatalf("only %d of the calls read in place", inPlace)
	}
	// Inside a multicall, each leg takes the same path.
	data := pack(t, routerABI, "multicall(uint256,bytes[])", deadline, [][]byte{
		pack(t, routerABI, "exactInputSingle((address,address,uint24,address,uint256,uint256,uint160))", single02{usdc, weth, big.NewInt(500), addressThis, e6(3000), milli18(995), new(big.Int)}),
		pack(t, routerABI, "unwrapWETH9(uint256,address)", milli18(995), escrow)})
	sameInPlace(t, router02, data, new(big.Int))
}

// methodBySig is the method of a with the signature sig.
func methodBySig(t *testing.T, a *abi.ABI, sig string) *abi.Method {
	t.Helper()
	for _, m := range a.Methods {
		if m.Sig == sig {
			return &m
		}
	}
	t.Fatalf("no method %s", sig)
	return nil
}

// TestHexBytesDecodesAsHex: call data decoded into the scratch buffer is what
// hex.DecodeString gives, and a string it refuses is refused.
func TestHexBytesDecodesAsHex(t *testing.T) {
	rng := rand.New(rand.NewPCG(3009, 1))
	digits := "0123456789abcdefABCDEFgx:/@G`"
	s := new(actions.Scratch)
	for range 20000 {
		b := make([]byte, 2*rng.IntN(40))
		for i := range b {
			if rng.IntN(50) == 0 {
				b[i] = digits[rng.IntN(len(digits))]
			} else {
				b[i] = digits[rng.IntN(22)]
			}
		}
		want, wantErr := hex.DecodeString(string(b))
		got, err := actions.HexBytes(string(b), s)
		if (err != nil) != (wantErr != nil) || err == nil && !bytes.Equal(got, want) {
			t.Fatalf("%q: got %x %v, want %x %v", b, got, err, want, wantErr)
		}
	}
}
