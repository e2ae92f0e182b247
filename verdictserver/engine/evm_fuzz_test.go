package engine

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/erc20"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
)

// openEVMPolicy allows every EVM venue and chain, and nothing else: whatever decodes and
// meets no sink or listed address is approved, so the fuzzers see approvals.
const openEVMPolicy = `{"venues": {"allowed": ["evm", "uniswap"]}, "chains": {"allowed": [84532, 8453]}}`

// fuzzDecode decodes tx directly (a panic fails the fuzzer) and through the engine: the
// verdict is valid, and an approval implies the action decoded.
func fuzzDecode(t *testing.T, e *Evaluator, d Decoder, tx map[string]any) {
	var err error
	if sd, ok := d.(SenderDecoder); ok {
		_, err = sd.DecodeFor(tx, escrow)
	} else {
		_, err = d.Decode(tx)
	}
	v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tx, Policy: mustPolicy(t, 1, openEVMPolicy)})
	mustBeValid(t, v)
	if err != nil && v.ReasonCode != verdict.ReasonDecodeFailure {
		t.Fatalf("the decoder refused (%v) but the verdict is %s", err, v.ReasonCode)
	}
	if v.Approved() && err != nil {
		t.Fatalf("approved what does not decode: %v", err)
	}
}

// FuzzEVMDecoder: any calldata and value sent to a token, or to a plain address.
func FuzzEVMDecoder(f *testing.F) {
	f.Add(pack(f, erc20.ABI, "transfer(address,uint256)", payee, e6(1)), uint64(0), true)
	f.Add(pack(f, erc20.ABI, "approve(address,uint256)", payee, actions.MaxUint256), uint64(0), true)
	f.Add(pack(f, erc20.ABI, "transferFrom(address,address,uint256)", escrow, payee, e6(1)), uint64(0), true)
	f.Add(pack(f, erc20.ABI, "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)",
		escrow, payee, e6(2), big.NewInt(0), deadline, [32]byte{1}, make([]byte, 65)), uint64(0), true)
	f.Add([]byte{}, uint64(1e15), false)
	f.Add([]byte{0xa9, 0x05, 0x9c, 0xbb}, uint64(0), true)
	e := newEngine(f, Config{}, Deps{})
	f.Add(pack(f, erc20.ABI, "deposit()"), uint64(1e15), false)
	f.Add(pack(f, erc20.ABI, "withdraw(uint256)", e18(1)), uint64(0), false)
	f.Fuzz(func(t *testing.T, data []byte, value uint64, token bool) {
		// A token (USDC), the chain's WETH, or a plain address.
		to := []common.Address{usdc, weth, payee}[len(data)%3]
		if token {
			to = usdc
		}
		fuzzDecode(t, e, erc20.Decoder{}, evmTx("evm", 84532, to, data, new(big.Int).SetUint64(value)))
	})
}

// FuzzUniswapDecoder: any calldata to each kind of router, with or without value.
func FuzzUniswapDecoder(f *testing.F) {
	f.Add(pack(f, uniswap.RouterABI, "swapExactTokensForTokens(uint256,uint256,address[],address,uint256)", e6(3000), milli18(995), []common.Address{usdc, weth}, escrow, deadline), uint8(0), uint64(0))
	f.Add(pack(f, uniswap.RouterABI, "exactInput((bytes,address,uint256,uint256,uint256))", multi{v3path(usdc, tkn, weth), escrow, deadline, e6(3000), milli18(995)}), uint8(1), uint64(0))
	f.Add(pack(f, uniswap.RouterABI, "multicall(uint256,bytes[])", deadline, [][]byte{
		pack(f, uniswap.RouterABI, "exactInputSingle((address,address,uint24,address,uint256,uint256,uint160))", single02{usdc, weth, big.NewInt(500), uniswap.AddressThis, e6(3000), milli18(995), new(big.Int)}),
		pack(f, uniswap.RouterABI, "unwrapWETH9(uint256,address)", milli18(995), escrow)}), uint8(2), uint64(0))
	f.Add(pack(f, uniswap.RouterABI, "exactInputSingle((address,address,uint24,address,uint256,uint256,uint256,uint160))", single{usdc, weth, big.NewInt(3000), common.Address{}, deadline, e6(3000), milli18(995), new(big.Int)}), uint8(1), uint64(0))
	f.Add(execute(f, []byte{uniswap.CmdWrapETH, uniswap.CmdV2SwapExactIn}, urToAmount(f, uniswap.AddressThis, e18(1)), urV2In(f, uniswap.MsgSender, e18(1), e6(2990), []common.Address{weth, usdc}, false)), uint8(4), uint64(1e18))
	f.Add(execute(f, []byte{uniswap.CmdV3SwapExactIn, uniswap.CmdUnwrapWETH}, urV3In(f, uniswap.AddressThis, e6(3000), milli18(995), v3path(usdc, weth), true, true), urToAmount(f, escrow, milli18(995))), uint8(3), uint64(0))
	f.Add(execute(f, []byte{uniswap.CmdExecuteSubPlan}, encode(f, []string{"bytes", "bytes[]"}, []byte{uniswap.CmdTransfer}, [][]byte{urTokenTo(f, usdc, payee, big.NewInt(1))})), uint8(4), uint64(0))
	f.Add(execute(f, []byte{uniswap.CmdPermit2Permit}, encode(f, []string{"permitSingle", "bytes"}, permitSingle{permitDetail{usdc, uniswap.MaxUint160, deadline, big.NewInt(0)}, urV21, deadline}, make([]byte, 65))), uint8(3), uint64(0))
	key := poolKey{usdc, weth, big.NewInt(500), big.NewInt(10), common.Address{}}
	f.Add(execute(f, []byte{uniswap.CmdV4Swap}, v4Swap(f, []byte{uniswap.V4SwapExactInSingle, uniswap.V4SettleAll, uniswap.V4TakeAll},
		v4InSingleParams(f, v4InSingle{key, true, e6(3000), milli18(995), new(big.Int), nil}, true),
		encode(f, []string{"address", "uint256"}, usdc, e6(3000)), encode(f, []string{"address", "uint256"}, weth, milli18(995)))), uint8(3), uint64(0))
	f.Add(execute(f, []byte{uniswap.CmdV4Swap}, v4Swap(f, []byte{uniswap.V4SwapExactOut, uniswap.V4SettleAll, uniswap.V4TakeAll},
		v4OutMultiParams(f, v4OutMulti{usdc, []pathKey{{common.Address{}, big.NewInt(500), big.NewInt(10), common.Address{}, nil}}, e6(3000), milli18(1005)}),
		encode(f, []string{"address", "uint256"}, common.Address{}, milli18(1005)), encode(f, []string{"address", "uint256"}, usdc, e6(3000)))), uint8(4), uint64(1e18))
	routers := []common.Address{v2Router, swapRouter, router02, urV21, urV20, urOther}
	e := newEngine(f, Config{}, Deps{})
	f.Fuzz(func(t *testing.T, data []byte, router uint8, value uint64) {
		to := routers[int(router)%len(routers)]
		fuzzDecode(t, e, testUniswap, evmTx("uniswap", 84532, to, data, new(big.Int).SetUint64(value)))
	})
}

// FuzzUniversalRouterPlan: any commands and inputs in an execute, on each router version.
func FuzzUniversalRouterPlan(f *testing.F) {
	f.Add([]byte{uniswap.CmdV3SwapExactIn}, urV3In(f, uniswap.MsgSender, e6(3000), milli18(995), v3path(usdc, weth), true, true), []byte{}, uint8(0))
	f.Add([]byte{uniswap.CmdWrapETH, uniswap.CmdV2SwapExactIn}, urToAmount(f, uniswap.AddressThis, e18(1)), urV2In(f, uniswap.MsgSender, e18(1), e6(2990), []common.Address{weth, usdc}, false), uint8(1))
	f.Add([]byte{uniswap.CmdSweep, uniswap.CmdPayPortion}, urTokenTo(f, weth, uniswap.MsgSender, big.NewInt(1)), urTokenTo(f, weth, payee, big.NewInt(25)), uint8(2))
	f.Add([]byte{uniswap.CmdV4Swap}, v4Swap(f, []byte{uniswap.V4SwapExactInSingle, uniswap.V4TakeAll},
		v4InSingleParams(f, v4InSingle{poolKey{usdc, weth, big.NewInt(500), big.NewInt(10), common.Address{}}, true, e6(3000), milli18(995), new(big.Int), nil}, true),
		encode(f, []string{"address", "uint256"}, weth, milli18(995))), []byte{}, uint8(0))
	f.Add([]byte{uniswap.CmdExecuteSubPlan, uniswap.CmdTransfer}, encode(f, []string{"bytes", "bytes[]"}, []byte{uniswap.CmdTransfer}, [][]byte{urTokenTo(f, usdc, payee, big.NewInt(1))}), urTokenTo(f, usdc, payee, big.NewInt(1)), uint8(1))
	routers := []struct {
		chain int64
		addr  common.Address
	}{{84532, urV21}, {84532, urV20}, {8453, urV12}, {84532, urOther}}
	e := newEngine(f, Config{}, Deps{})
	f.Fuzz(func(t *testing.T, cmds, in0, in1 []byte, router uint8) {
		r := routers[int(router)%len(routers)]
		inputs := [][]byte{in0, in1}
		if len(cmds) < 2 {
			inputs = inputs[:len(cmds)]
		}
		if len(cmds) > 2 {
			cmds = cmds[:2]
		}
		data := execute(t, cmds, inputs...)
		fuzzDecode(t, e, testUniswap, evmTx("uniswap", r.chain, r.addr, data, nil))
	})
}
