package uniswap

import (
	"encoding/hex"
	"math/big"
	"strconv"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/evmcall"
	"github.com/x402gate/x402gate/verdictserver/engine/internal/intern"
)

// The Universal Router (docs/policy.md#universal-router): execute(commands, inputs[,
// deadline]) runs one command per byte of commands. What a byte means depends on the
// deployed version, so the router's entry in the registry of known contracts picks the table
// (decode_registry.go); a router the registry does not know is not read. A command outside the table
// makes the whole plan undecodable: it is never skipped.

// urVersion is one Universal Router version's command table.
type urVersion struct {
	name string
	// mask is COMMAND_TYPE_MASK: the router ignores the other bits (but 0x80, allow revert).
	mask byte
	// commands are the command types this decoder reads for the version.
	commands map[byte]string
	// hopPrices: the swap commands' inputs end with uint256[] minHopPriceX36 (2.1.1).
	hopPrices bool
}

// The command types (Commands.sol).
const (
	CmdV3SwapExactIn      = 0x00
	CmdV3SwapExactOut     = 0x01
	CmdPermit2TransferFrm = 0x02
	CmdPermit2PermitBatch = 0x03
	CmdSweep              = 0x04
	CmdTransfer           = 0x05
	CmdPayPortion         = 0x06
	CmdPayPortionFull     = 0x07
	CmdV2SwapExactIn      = 0x08
	CmdV2SwapExactOut     = 0x09
	CmdPermit2Permit      = 0x0a
	CmdWrapETH            = 0x0b
	CmdUnwrapWETH         = 0x0c
	CmdPermit2TransferBat = 0x0d
	CmdBalanceCheckERC20  = 0x0e
	CmdExecuteSubPlan     = 0x21
)

var commonCommands = map[byte]string{
	CmdV3SwapExactIn: "V3_SWAP_EXACT_IN", CmdV3SwapExactOut: "V3_SWAP_EXACT_OUT", CmdPermit2TransferFrm: "PERMIT2_TRANSFER_FROM",
	CmdPermit2PermitBatch: "PERMIT2_PERMIT_BATCH", CmdSweep: "SWEEP", CmdTransfer: "TRANSFER", CmdPayPortion: "PAY_PORTION",
	CmdV2SwapExactIn: "V2_SWAP_EXACT_IN", CmdV2SwapExactOut: "V2_SWAP_EXACT_OUT", CmdPermit2Permit: "PERMIT2_PERMIT",
	CmdWrapETH: "WRAP_ETH", CmdUnwrapWETH: "UNWRAP_WETH", CmdPermit2TransferBat: "PERMIT2_TRANSFER_FROM_BATCH",
}

func withCommands(extra map[byte]string) map[byte]string {
	m := map[byte]string{}
	for k, v := range commonCommands {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

var (
	urV1_2 = &urVersion{name: "1.2", mask: 0x1f, commands: commonCommands}
	urV2_0 = &urVersion{name: "2.0", mask: 0x3f, commands: withCommands(map[byte]string{CmdBalanceCheckERC20: "BALANCE_CHECK_ERC20", CmdV4Swap: "V4_SWAP", CmdExecuteSubPlan: "EXECUTE_SUB_PLAN"})}
	urV2_1 = &urVersion{name: "2.1.1", mask: 0x7f, hopPrices: true, commands: withCommands(map[byte]string{CmdPayPortionFull: "PAY_PORTION_FULL_PRECISION", CmdBalanceCheckERC20: "BALANCE_CHECK_ERC20", CmdV4Swap: "V4_SWAP", CmdExecuteSubPlan: "EXECUTE_SUB_PLAN"})}
)

func args(types ...string) abi.Arguments {
	out := make(abi.Arguments, len(types))
	for i, s := range types {
		t, err := abi.NewType(s, "", nil)
		if err != nil {
			panic("engine: bad abi type " + s)
		}
		out[i] = abi.Argument{Type: t}
	}
	return out
}

func tupleArg(t string, comps ...abi.ArgumentMarshaling) abi.Argument {
	typ, err := abi.NewType(t, "", comps)
	if err != nil {
		panic("engine: bad abi tuple")
	}
	return abi.Argument{Type: typ}
}

var (
	permitDetails = abi.ArgumentMarshaling{Name: "details", Type: "tuple", Components: []abi.ArgumentMarshaling{
		{Name: "token", Type: "address"}, {Name: "amount", Type: "uint160"}, {Name: "expiration", Type: "uint48"}, {Name: "nonce", Type: "uint48"}}}
	urIn = map[string]abi.Arguments{
		"v3":       args("address", "uint256", "uint256", "bytes", "bool"),
		"v3hop":    args("address", "uint256", "uint256", "bytes", "bool", "uint256[]"),
		"v2":       args("address", "uint256", "uint256", "address[]", "bool"),
		"v2hop":    args("address", "uint256", "uint256", "address[]", "bool", "uint256[]"),
		"tokenTo":  args("address", "address", "uint256"),
		"p2from":   args("address", "address", "uint160"),
		"toAmount": args("address", "uint256"),
		"subPlan":  args("bytes", "bytes[]"),
		"permit": {tupleArg("tuple", permitDetails, abi.ArgumentMarshaling{Name: "spender", Type: "address"}, abi.ArgumentMarshaling{Name: "sigDeadline", Type: "uint256"}),
			args("bytes")[0]},
		"permitBatch": {tupleArg("tuple", abi.ArgumentMarshaling{Name: "details", Type: "tuple[]", Components: permitDetails.Components},
			abi.ArgumentMarshaling{Name: "spender", Type: "address"}, abi.ArgumentMarshaling{Name: "sigDeadline", Type: "uint256"}), args("bytes")[0]},
		"transferBatch": {tupleArg("tuple[]", abi.ArgumentMarshaling{Name: "from", Type: "address"}, abi.ArgumentMarshaling{Name: "to", Type: "address"},
			abi.ArgumentMarshaling{Name: "amount", Type: "uint160"}, abi.ArgumentMarshaling{Name: "token", Type: "address"})},
	}
	// MaxUint160 is 2^160-1, Permit2's largest allowance (type(uint160).max).
	MaxUint160     = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 160), big.NewInt(1))
	contractBalanc = new(big.Int).Lsh(big.NewInt(1), 255) // ActionConstants.CONTRACT_BALANCE
)

// plan is one execute being decoded: the router's version and what it holds so far.
type plan struct {
	*uni
	v    *urVersion
	held map[common.Address]bool
}

func (u *uni) execute(data []byte) (*actions.Action, *actions.DecodeError) {
	m, vals, de := evmcall.Method(RouterABI, data)
	if de != nil {
		return nil, de
	}
	v := u.known.ur
	act := u.scratch.CallAction(Protocol, u.chainID, u.router, evmcall.SelectorText(m.ID))
	act.Kind, act.Notional = "uniswap.ur.execute", []actions.Amount{}
	act.Fields["function"], act.Fields["routerVersion"], act.Fields["value"] = m.Sig, v.name, evmcall.ValueText(u.value)
	if u.value.Sign() > 0 {
		act.Assets = []common.Address{actions.NativeAsset}
		act.Notional = []actions.Amount{{Asset: actions.NativeAsset, Value: u.value}}
	}
	p := &plan{uni: u, v: v, held: map[common.Address]bool{}}
	legs, de := p.commands(vals[0].([]byte), vals[1].([][]byte), "proposedTx.data.commands", 0)
	if de != nil {
		return nil, de
	}
	act.Legs = legs
	if len(p.held) > 0 {
		act.Stranded = []common.Address{u.router}
	}
	return act, nil
}

func (p *plan) commands(cmds []byte, inputs [][]byte, field string, depth int) ([]*actions.Action, *actions.DecodeError) {
	if len(cmds) == 0 || len(cmds) > 64 || len(cmds) != len(inputs) {
		return nil, &actions.DecodeError{Field: field, Problem: "must be 1 to 64 commands, one per input"}
	}
	legs := make([]*actions.Action, len(cmds))
	for i, b := range cmds {
		f := field + "." + strconv.Itoa(i)
		cmd := b & p.v.mask
		name, known := p.v.commands[cmd]
		if !known {
			return nil, &actions.DecodeError{Field: f, Problem: "command 0x" + hex.EncodeToString([]byte{b}) + " is not one this decoder reads on a version " + p.v.name + " Universal Router"}
		}
		leg, _ := p.scratch.Action()
		leg.Protocol, leg.ChainID, leg.Kind, leg.Notional = Protocol, p.chainID, legKind(urLeg, name), []actions.Amount{}
		leg.Fields["command"], leg.Fields["allowRevert"] = byteText(b), b&0x80 != 0
		if de := p.command(leg, cmd, inputs[i], f, depth); de != nil {
			return nil, de
		}
		legs[i] = leg
	}
	return legs, nil
}

// recipient resolves the placeholders: address(1) is the caller, address(2) the router.
func (p *plan) recipient(a common.Address) common.Address {
	switch a {
	case MsgSender:
		return p.sender
	case AddressThis:
		return p.router
	}
	return a
}

// pay records that leg sends token to rcpt: the router keeps it, or it is a recipient.
func (p *plan) pay(leg *actions.Action, token, rcpt common.Address) {
	if rcpt == p.router {
		p.held[token] = true
		return
	}
	leg.Recipients = actions.AppendNew(leg.Recipients, rcpt)
}

// urToken reads a Payments token: address(0) is the native coin.
func urToken(a common.Address) common.Address {
	if a == (common.Address{}) {
		return actions.NativeAsset
	}
	return a
}

func (p *plan) swapArgs(v2 bool, in []byte) ([]any, error) {
	base, hop := "v3", "v3hop"
	if v2 {
		base, hop = "v2", "v2hop"
	}
	if p.v.hopPrices {
		return evmcall.Unpack(urIn[hop], in)
	}
	return evmcall.Unpack(urIn[base], in)
}

func (p *plan) command(leg *actions.Action, cmd byte, in []byte, field string, depth int) *actions.DecodeError {
	bad := func(err error) *actions.DecodeError {
		return &actions.DecodeError{Field: field, Problem: leg.Kind + " inputs: " + err.Error()}
	}
	switch cmd {
	case CmdV3SwapExactIn, CmdV3SwapExactOut, CmdV2SwapExactIn, CmdV2SwapExactOut:
		v2 := cmd == CmdV2SwapExactIn || cmd == CmdV2SwapExactOut
		vals, err := p.swapArgs(v2, in)
		if err != nil {
			return bad(err)
		}
		var tokens []common.Address
		if v2 {
			tokens = vals[3].([]common.Address)
		} else {
			path, fees, ok := v3Path(vals[3].([]byte))
			if !ok {
				return &actions.DecodeError{Field: field, Problem: "a V3 path must be token (fee token)+, 2 to 8 tokens"}
			}
			tokens = path
			leg.Fields["fees"] = fees
		}
		if len(tokens) < 2 || len(tokens) > 8 {
			return &actions.DecodeError{Field: field, Problem: "a path must name 2 to 8 tokens"}
		}
		exactOut := cmd == CmdV3SwapExactOut || cmd == CmdV2SwapExactOut
		if exactOut && !v2 {
			tokens = reversed(tokens) // docs/policy.md#uniswap: V3 exact-output paths run backwards
		}
		t := p.scratch.Trade()
		*t = actions.Trade{Kind: actions.TradeSwap, AssetIn: tokens[0], AssetOut: tokens[len(tokens)-1], ExactOut: exactOut}
		a1, a2 := vals[1].(*big.Int), vals[2].(*big.Int)
		if exactOut {
			t.AmountOut, t.MaxIn = a1, a2
		} else {
			t.AmountIn, t.MinOut = a1, a2
			if a1.Cmp(contractBalanc) == 0 {
				t.AmountIn = nil
			}
		}
		t.Side = evmcall.SwapSide(p.chainID, t.AssetIn, t.AssetOut)
		leg.Trade = t
		leg.Assets = append([]common.Address{}, tokens...)
		if p.v.hopPrices {
			t.PriceLimited = hopPricesLimited(vals[5].([]*big.Int), len(tokens)-1)
		}
		payerIsUser := vals[4].(bool)
		leg.Fields["payerIsUser"] = payerIsUser
		if payerIsUser {
			leg.Notional = nil // the trade's own input, from the agent's wallet
		} else {
			delete(p.held, t.AssetIn) // spends what the router holds, counted where it came in
		}
		rcpt := p.recipient(vals[0].(common.Address))
		leg.Fields["recipient"] = rcpt
		p.pay(leg, t.AssetOut, rcpt)
	case CmdPermit2TransferFrm:
		vals, err := evmcall.Unpack(urIn["p2from"], in)
		if err != nil {
			return bad(err)
		}
		token, rcpt, amt := vals[0].(common.Address), p.recipient(vals[1].(common.Address)), vals[2].(*big.Int)
		leg.Assets, leg.Notional = []common.Address{token}, []actions.Amount{{Asset: token, Value: amt}}
		p.pay(leg, token, rcpt)
	case CmdPermit2TransferBat:
		vals, err := evmcall.Unpack(urIn["transferBatch"], in)
		if err != nil {
			return bad(err)
		}
		if de := permit2Transfers(leg, vals[0], field, func(token, to common.Address) { p.pay(leg, token, to) }); de != nil {
			return de
		}
	case CmdPermit2Permit, CmdPermit2PermitBatch:
		key := "permit"
		if cmd == CmdPermit2PermitBatch {
			key = "permitBatch"
		}
		vals, err := evmcall.Unpack(urIn[key], in)
		if err != nil {
			return bad(err)
		}
		if de := permitGrants(leg, vals[0], cmd == CmdPermit2PermitBatch, field); de != nil {
			return de
		}
	case CmdSweep, CmdTransfer, CmdPayPortion, CmdPayPortionFull:
		vals, err := evmcall.Unpack(urIn["tokenTo"], in)
		if err != nil {
			return bad(err)
		}
		token, rcpt := urToken(vals[0].(common.Address)), p.recipient(vals[1].(common.Address))
		leg.Assets = []common.Address{token}
		leg.Fields["amount"] = vals[2].(*big.Int).String()
		if cmd == CmdSweep || cmd == CmdTransfer {
			delete(p.held, token)
		}
		if rcpt == p.router {
			return &actions.DecodeError{Field: field, Problem: leg.Kind + " to the router itself pays nothing out"}
		}
		leg.Recipients = []common.Address{rcpt}
	case CmdWrapETH, CmdUnwrapWETH:
		vals, err := evmcall.Unpack(urIn["toAmount"], in)
		if err != nil {
			return bad(err)
		}
		rcpt := p.recipient(vals[0].(common.Address))
		leg.Fields["amount"] = vals[1].(*big.Int).String()
		w, known := evmcall.WrappedNative(p.chainID)
		if cmd == CmdWrapETH {
			leg.Assets = []common.Address{actions.NativeAsset}
			if known {
				leg.Assets = append(leg.Assets, w)
				p.pay(leg, w, rcpt)
			} else if rcpt != p.router {
				leg.Recipients = []common.Address{rcpt}
			}
			return nil
		}
		leg.Assets = []common.Address{actions.NativeAsset}
		for a := range p.held {
			if !known || a == w {
				delete(p.held, a)
			}
		}
		p.pay(leg, actions.NativeAsset, rcpt)
	case CmdBalanceCheckERC20:
		vals, err := evmcall.Unpack(urIn["tokenTo"], in)
		if err != nil {
			return bad(err)
		}
		leg.Screen = []common.Address{vals[0].(common.Address), vals[1].(common.Address)}
	case CmdV4Swap:
		return p.v4Swap(leg, in, field)
	case CmdExecuteSubPlan:
		if depth >= 2 {
			return &actions.DecodeError{Field: field, Problem: "sub-plans nest at most 2 deep"}
		}
		vals, err := evmcall.Unpack(urIn["subPlan"], in)
		if err != nil {
			return bad(err)
		}
		legs, de := p.commands(vals[0].([]byte), vals[1].([][]byte), field+".commands", depth+1)
		if de != nil {
			return de
		}
		leg.Legs = legs
	default:
		return &actions.DecodeError{Field: field, Problem: leg.Kind + " is not read"}
	}
	return nil
}

func reversed(a []common.Address) []common.Address {
	out := make([]common.Address, len(a))
	for i, x := range a {
		out[len(a)-1-i] = x
	}
	return out
}

// hopPricesLimited reports whether a Universal Router 2.1.1 swap's minHopPriceX36 limits the
// price of every one of its hops: one non-zero price per hop.
func hopPricesLimited(prices []*big.Int, hops int) bool {
	if len(prices) != hops || hops == 0 {
		return false
	}
	for _, p := range prices {
		if p == nil || p.Sign() <= 0 {
			return false
		}
	}
	return true
}

// The kinds of legs: "uniswap.ur." and a Universal Router command's name, "uniswap.v4." and a
// v4 action's.
const (
	urLeg = iota
	v4Leg
)

// legPrefixes go before the name in the kinds of legs.
var legPrefixes = [...]string{urLeg: "uniswap.ur.", v4Leg: "uniswap.v4."}

// legKey is a kind of leg: which prefix, and the name.
type legKey struct {
	which int
	name  string
}

// legKinds caches legKind.
var legKinds intern.Memo[legKey, string]

// legKind is legPrefixes[which] + name, cached.
func legKind(which int, name string) string {
	return legKinds.Get(legKey{which, name}, intern.FnvString(name)^uint64(which), func(k legKey) string {
		return legPrefixes[k.which] + k.name
	}).Val
}

// byteTexts are "0x" and two hex digits, for each byte.
var byteTexts = func() (t [256]string) {
	for i := range t {
		t[i] = "0x" + hex.EncodeToString([]byte{byte(i)})
	}
	return t
}()

// byteText is "0x" and the two hex digits of b (a command or action byte).
func byteText(b byte) string { return byteTexts[b] }
