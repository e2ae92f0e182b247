package uniswap

import (
	"encoding/binary"
	"math/big"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/evmcall"
)

// The addresses the tests decode with: the agent, and routers of each kind on 84532.
var (
	agent      = common.HexToAddress("0x1111111111111111111111111111111111111111")
	swapRouter = common.HexToAddress("0xE592427A0AEce92De3Edee1F18E0157C05861564") // V3 SwapRouter
	router02   = common.HexToAddress("0x2626664c2603336E57B271c5C0b26F421741e481") // SwapRouter02 (Base)
	urV21      = common.HexToAddress("0x8B844f885672f333Bc0042cB669255f93a4C1E6b") // Universal Router 2.1.1 (Base Sepolia)
	urOther    = common.HexToAddress("0x7777777777777777777777777777777777777777") // a router the decoder does not know
)

// sameInPlace fails t unless the router call data decodes alike with the single swaps'
// params read in place and with every argument unpacked by go-ethereum: the same action,
// or the same refusal. It reports whether the call read in place.
func sameInPlace(t *testing.T, router common.Address, data []byte, value *big.Int) bool {
	t.Helper()
	kind := map[common.Address]ContractKind{swapRouter: ContractSwapRouter, router02: ContractSwapRouter02}[router]
	fast := &uni{chainID: 84532, router: router, known: known{kind: kind}, sender: agent, value: value}
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
	m := RouterABI.MethodByID(data[:4])
	if m == nil {
		return false
	}
	_, inPlace := evmcall.ReadStaticTuple(m, data[4:])
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
		m := methodBySig(t, &RouterABI.ABI, sig)
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
	call := func(sig string, args ...any) []byte {
		m := methodBySig(t, &RouterABI.ABI, sig)
		enc, err := m.Inputs.Pack(args...)
		if err != nil {
			t.Fatal(err)
		}
		return append(append([]byte{}, m.ID...), enc...)
	}
	usdc, weth := common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e"), common.HexToAddress("0x4200000000000000000000000000000000000006")
	single := append([]byte{}, methodBySig(t, &RouterABI.ABI, "exactInputSingle((address,address,uint24,address,uint256,uint256,uint160))").ID...)
	for _, w := range []*big.Int{usdc.Big(), weth.Big(), big.NewInt(500), AddressThis.Big(), big.NewInt(3e9), big.NewInt(995e15), new(big.Int)} {
		single = append(single, common.LeftPadBytes(w.Bytes(), 32)...)
	}
	data := call("multicall(uint256,bytes[])", big.NewInt(1_900_000_000), [][]byte{
		single,
		call("unwrapWETH9(uint256,address)", big.NewInt(995e15), agent)})
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

// FuzzInPlaceReadsAsUnpack: any call data to either swap router, with any value, decodes
// alike read in place and unpacked (sameInPlace).
func FuzzInPlaceReadsAsUnpack(f *testing.F) {
	for _, m := range RouterABI.Methods {
		if isSingle(m.RawName) {
			data := append([]byte{}, m.ID...)
			for i := range m.Inputs[0].Type.TupleElems {
				w := make([]byte, 32)
				w[12], w[31] = byte(i+1), byte(i+1) // a clean address word, and an integer past 2^64
				data = append(data, w...)
			}
			f.Add(data, false, uint64(0))
			f.Add(data, true, uint64(1))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, v3Router bool, value uint64) {
		r := router02
		if v3Router {
			r = swapRouter
		}
		sameInPlace(t, r, data, new(big.Int).SetUint64(value))
	})
}
