package engine

import (
	"context"
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/erc20"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
	"github.com/x402gate/x402gate/verdictserver/policy"
)

// evmAction draws an EVM action from the decoders' shapes with random parties, amounts and
// routers, and sometimes breaks it (a cut, a flipped byte, a wrong member).
func (g gen) evmAction(t testing.TB) map[string]any {
	a := func() common.Address { return addrPool[g.pick(len(addrPool))] }
	amt := func() *big.Int {
		return []*big.Int{new(big.Int), big.NewInt(1), e6(5), e6(3000), milli18(995), e18(2), actions.MaxUint256}[g.pick(7)]
	}
	small := func() *big.Int { return []*big.Int{new(big.Int), big.NewInt(1), e6(3000), milli18(995)}[g.pick(4)] }
	tokens := []common.Address{usdc, weth, tkn, listed}
	tk := func() common.Address { return tokens[g.pick(len(tokens))] }
	rcpt := func() common.Address {
		if g.pick(3) == 0 {
			return []common.Address{uniswap.MsgSender, uniswap.AddressThis, {}}[g.pick(3)]
		}
		return a()
	}
	var proto string
	var to common.Address
	var data []byte
	var value *big.Int
	switch g.pick(9) {
	case 0:
		proto, to, value = "evm", a(), amt()
	case 1:
		proto, to, data = "evm", tk(), pack(t, erc20.ABI, "transfer(address,uint256)", a(), amt())
	case 2:
		proto, to, data = "evm", tk(), pack(t, erc20.ABI, "approve(address,uint256)", a(), amt())
	case 3:
		proto, to, data = "evm", tk(), pack(t, erc20.ABI, "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)",
			a(), a(), amt(), new(big.Int), deadline, [32]byte{9}, uint8(27), [32]byte{1}, [32]byte{2})
	case 4:
		proto, to = "uniswap", []common.Address{v2Router, router02}[g.pick(2)]
		data = pack(t, uniswap.RouterABI, "swapExactTokensForTokens(uint256,uint256,address[],address,uint256)", small(), small(), []common.Address{tk(), tk()}, rcpt(), deadline)
	case 5:
		proto, to = "uniswap", swapRouter
		data = pack(t, uniswap.RouterABI, "exactInputSingle((address,address,uint24,address,uint256,uint256,uint256,uint160))", single{tk(), tk(), big.NewInt(500), rcpt(), deadline, small(), small(), new(big.Int)})
	case 6:
		proto, to = "uniswap", router02
		calls := [][]byte{pack(t, uniswap.RouterABI, "exactInputSingle((address,address,uint24,address,uint256,uint256,uint160))", single02{tk(), tk(), big.NewInt(500), rcpt(), small(), small(), new(big.Int)})}
		if g.coin() {
			calls = append(calls, pack(t, uniswap.RouterABI, "sweepToken(address,uint256,address)", tk(), small(), rcpt()))
		}
		data = pack(t, uniswap.RouterABI, "multicall(uint256,bytes[])", deadline, calls)
	default:
		proto, to = "uniswap", []common.Address{urV21, urV20, urOther}[g.pick(3)]
		hop := to == urV21 || (to == urOther && g.coin())
		var cmds []byte
		var ins [][]byte
		for range 1 + g.pick(3) {
			if to != urOther && g.pick(6) == 0 {
				in, out := tk(), tk()
				key := poolKey{in, out, big.NewInt(500), big.NewInt(10), []common.Address{{}, listed}[g.pick(2)]}
				acts := []byte{uniswap.V4SwapExactInSingle, uniswap.V4SettleAll, []byte{uniswap.V4TakeAll, uniswap.V4Take}[g.pick(2)]}
				last := encode(t, []string{"address", "uint256"}, out, small())
				if acts[2] == uniswap.V4Take {
					last = encode(t, []string{"address", "address", "uint256"}, out, rcpt(), small())
				}
				cmds, ins = append(cmds, uniswap.CmdV4Swap), append(ins, v4Swap(t, acts,
					v4InSingleParams(t, v4InSingle{key, true, small(), small(), new(big.Int), nil}, to == urV21),
					encode(t, []string{"address", "uint256"}, in, small()), last))
				continue
			}
			switch g.pick(5) {
			case 0:
				cmds, ins = append(cmds, uniswap.CmdV3SwapExactIn), append(ins, urV3In(t, rcpt(), small(), small(), v3path(tk(), tk()), g.coin(), hop))
			case 1:
				cmds, ins = append(cmds, uniswap.CmdV2SwapExactIn), append(ins, urV2In(t, rcpt(), small(), small(), []common.Address{tk(), tk()}, g.coin()))
			case 2:
				cmds, ins = append(cmds, []byte{uniswap.CmdSweep, uniswap.CmdTransfer, uniswap.CmdPayPortion}[g.pick(3)]), append(ins, urTokenTo(t, tk(), rcpt(), small()))
			case 3:
				cmds, ins = append(cmds, []byte{uniswap.CmdWrapETH, uniswap.CmdUnwrapWETH}[g.pick(2)]), append(ins, urToAmount(t, rcpt(), small()))
			default:
				cmds, ins = append(cmds, uniswap.CmdExecuteSubPlan), append(ins, encode(t, []string{"bytes", "bytes[]"}, []byte{uniswap.CmdTransfer}, [][]byte{urTokenTo(t, tk(), rcpt(), small())}))
			}
		}
		data = execute(t, cmds, ins...)
		if g.coin() {
			value = small()
		}
	}
	if len(data) > 4 && g.pick(6) == 0 {
		switch g.pick(3) {
		case 0:
			data = data[:4+g.pick(len(data)-4)]
		case 1:
			data = slices.Clone(data)
			data[4+g.pick(len(data)-4)] ^= byte(1 + g.pick(255))
		default:
			data = append(slices.Clone(data), 0)
		}
	}
	tx := evmTx(proto, chainPool[g.pick(2)], to, data, value)
	if g.pick(20) == 0 {
		tx["gas"] = json.Number("21000")
	}
	return tx
}

// TestEveryEVMVerdictIsConsistent is the property test over the EVM decoders: every verdict
// passes the verdict package's validator and the client's strict parser; an approved action
// decodes, fails no check, names no sink among its recipients and no listed address among
// its recipients, assets and screened addresses (hooks, owners), legs included.
func TestEveryEVMVerdictIsConsistent(t *testing.T) {
	e := newEngine(t, Config{}, Deps{})
	counts := map[verdict.ReasonCode]int{}
	for seed := uint64(1); seed <= 3000; seed++ {
		g := gen{rand.New(rand.NewPCG(seed, 11))}
		pol := g.policy(t)
		if pol != nil && pol.Doc.Venues != nil {
			pol.Doc.Venues.Allowed = append(slices.Clone(pol.Doc.Venues.Allowed), "evm", "uniswap")
		}
		if pol != nil && g.pick(3) == 0 {
			pol.Doc.Swaps = nil
			if g.coin() {
				yes, bps := true, 100
				pol.Doc.Swaps = &policy.Swaps{RequireMinOut: &yes, MaxSlippageBps: &bps}
			}
		}
		tx := g.evmAction(t)
		v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tx, Policy: pol})
		body := mustBeValid(t, v) // verdict.ParseVerdict, the client's validator
		counts[v.ReasonCode]++
		if !v.Approved() {
			continue
		}
		act, de := e.decode(tx, escrow, nil)
		if de != nil {
			t.Fatalf("seed %d: approved an action that does not decode: %v", seed, de)
		}
		act.Walk(func(a *Action) {
			for _, r := range a.Recipients {
				if _, sink := builtinSink(r); sink || e.sanctions.Load().Contains(r) {
					t.Fatalf("seed %d: approved a recipient %s that is a sink or listed\n%s", seed, r.Hex(), body)
				}
			}
			for _, x := range append(slices.Clone(a.Screen), a.Assets...) {
				if e.sanctions.Load().Contains(x) {
					t.Fatalf("seed %d: approved a listed address %s\n%s", seed, x.Hex(), body)
				}
			}
			if len(a.Stranded) > 0 {
				t.Fatalf("seed %d: approved stranded output\n%s", seed, body)
			}
		})
	}
	t.Logf("reason codes over 3000 random EVM actions: %v", counts)
	for _, c := range []verdict.ReasonCode{verdict.ReasonAllowed, verdict.ReasonDecodeFailure, verdict.ReasonSanctionedAddress,
		verdict.ReasonSinkRecipient, verdict.ReasonNoSlippageGuard, verdict.ReasonAssetNotInUniverse, verdict.ReasonRecipientNotAllowed} {
		if counts[c] == 0 {
			t.Errorf("the generator never produced %s: widen it", c)
		}
	}
}
