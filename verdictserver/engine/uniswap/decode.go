// Package uniswap decodes the policy engine's "uniswap" protocol (docs/policy.md#uniswap):
// calls to Uniswap's V2 Router02, V3 SwapRouter and SwapRouter02 (decode.go), its Universal
// Router and the v4 actions it carries (universal.go, v4.go), and Permit2 (permit2.go), each
// read only at an address the registry of known contracts holds (registry.go).
package uniswap

import (
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/evmcall"
)

// Protocol is the proposedTx.protocol this package decodes.
const Protocol = "uniswap"

// Decoder reads Protocol calls: V2 Router02, V3 SwapRouter, SwapRouter02, the
// Universal Router and Permit2 (docs/policy.md#uniswap), each only at an address its registry
// knows for the chain (docs/policy.md#known-contracts). It needs the caller: the routers'
// address(1) placeholder means msg.sender, the agent's wallet.
type Decoder struct {
	// reg is the registry of known contracts; nil (the zero Decoder) is the built-in one.
	reg registry
}

// Protocol is "uniswap".
func (Decoder) Protocol() string { return Protocol }

// Decode reads tx with no sender: a router's address(1) placeholder is the zero address.
func (d Decoder) Decode(tx map[string]any) (*actions.Action, error) {
	return d.DecodeFor(tx, common.Address{})
}

// The router placeholders (docs/policy.md#uniswap): MsgSender (address(1)) is whoever calls
// the router, the agent; AddressThis (address(2)) is the router itself.
var (
	MsgSender   = common.BytesToAddress([]byte{1})
	AddressThis = common.BytesToAddress([]byte{2})
)

// uni is one call being decoded.
type uni struct {
	chainID int64
	router  common.Address
	known   known // the registry's entry for router
	sender  common.Address
	value   *big.Int
	// scratch is memory for the actions, or nil (actions.Scratch).
	scratch *actions.Scratch
	// slowTuples reads every argument with go-ethereum's unpack, never in place
	// (evmcall.StaticTuple); the tests compare the two.
	slowTuples bool
}

// DecodeFor reads tx sent by sender, whom the routers' address(1) placeholder means.
func (d Decoder) DecodeFor(tx map[string]any, sender common.Address) (*actions.Action, error) {
	return d.DecodeInto(tx, sender, nil)
}

// DecodeInto is DecodeFor, building the actions in s.
func (d Decoder) DecodeInto(tx map[string]any, sender common.Address, s *actions.Scratch) (*actions.Action, error) {
	c, de := evmcall.ReadCall(tx, s)
	if de != nil {
		return nil, de
	}
	k, ok := d.reg.knownAt(s, c.ChainID, c.To)
	if !ok {
		// docs/policy.md#known-contracts: a router selector means nothing at an unknown address.
		return nil, actions.Fail("to", c.To.Hex()+" is not a Uniswap contract known on chain "+strconv.FormatInt(c.ChainID, 10))
	}
	u := &uni{chainID: c.ChainID, router: c.To, known: k, sender: sender, value: c.Value, scratch: s}
	switch k.kind {
	case ContractUniversalRouter:
		if len(c.Data) < 4 || (c.Selector() != selExecute && c.Selector() != selExecuteNoDeadline) {
			return nil, actions.Fail("data", "a Universal Router call must be execute")
		}
		act, de := u.execute(c.Data)
		if de != nil {
			return nil, de
		}
		return act, nil
	case ContractPermit2:
		act, de := u.permit2Call(c.Data)
		if de != nil {
			return nil, de
		}
		return act, nil
	}
	act, de := u.call(c.Data, 0)
	if de != nil {
		return nil, de
	}
	act.Fields["value"] = evmcall.ValueText(c.Value)
	if c.Value.Sign() > 0 {
		act.Assets = actions.AppendNew(act.Assets, actions.NativeAsset)
	}
	return act, nil
}

var (
	selExecute           = "0x3593564c"
	selExecuteNoDeadline = "0x24856bc3"
)

// call decodes one router call: a swap, a payment helper, or a multicall of them.
func (u *uni) call(data []byte, depth int) (*actions.Action, *actions.DecodeError) {
	m, de := evmcall.MethodOf(RouterABI, data)
	if de != nil {
		return nil, de
	}
	if !routerReads(u.known.kind, m.Name) {
		return nil, actions.Fail("data", m.Sig+" is not a function of a "+string(u.known.kind))
	}
	var vals []any
	var words v3Single
	single := &words
	if u.slowTuples || !isSingle(m.RawName) || !readsInPlace(m, data, single) {
		single = nil
		if vals, de = evmcall.MethodArgs(m, data); de != nil {
			return nil, de
		}
	}
	act := u.scratch.CallAction(Protocol, u.chainID, u.router, evmcall.SelectorText(m.ID))
	act.Fields["function"] = m.Sig
	switch m.RawName {
	case "multicall":
		if depth > 0 {
			return nil, actions.Fail("data", "a multicall inside a multicall is not read")
		}
		calls := vals[len(vals)-1].([][]byte)
		if len(calls) == 0 || len(calls) > 64 {
			return nil, actions.Fail("data", "a multicall must carry 1 to 64 calls")
		}
		act.Kind = "uniswap.multicall"
		act.Notional = []actions.Amount{}
		for i, inner := range calls {
			leg, de := u.call(inner, depth+1)
			if de != nil {
				de.Field = "proposedTx.data.calls." + itoa(i)
				return nil, de
			}
			act.Legs = append(act.Legs, leg)
		}
		u.settle(act)
		return act, nil
	case "unwrapWETH9", "sweepToken", "refundETH":
		u.payment(act, m.Name, vals)
		if depth == 0 {
			u.settle(&actions.Action{Legs: []*actions.Action{act}})
		}
		return act, nil
	}
	if de := u.swap(act, m.Name, vals, single); de != nil {
		return nil, de
	}
	if depth == 0 {
		u.settle(&actions.Action{Legs: []*actions.Action{act}})
	}
	return act, nil
}

// routerFunctions are the RouterABI functions each swap router has, by go-ethereum's name
// of the overload (decode_evm_abi.go).
var routerFunctions = map[ContractKind][]string{
	ContractV2Router: {"swapExactTokensForTokens", "swapTokensForExactTokens", "swapExactETHForTokens", "swapETHForExactTokens",
		"swapExactTokensForETH", "swapTokensForExactETH", "swapExactTokensForTokensSupportingFeeOnTransferTokens",
		"swapExactETHForTokensSupportingFeeOnTransferTokens", "swapExactTokensForETHSupportingFeeOnTransferTokens"},
	ContractSwapRouter: {"exactInputSingle", "exactInput", "exactOutputSingle", "exactOutput", "multicall", "unwrapWETH9",
		"sweepToken", "refundETH"},
	ContractSwapRouter02: {"swapExactTokensForTokens0", "swapTokensForExactTokens0", "exactInputSingle0", "exactInput0",
		"exactOutputSingle0", "exactOutput0", "multicall", "multicall0", "multicall1", "unwrapWETH9", "unwrapWETH90",
		"sweepToken", "sweepToken0", "refundETH"},
}

// routerReads reports whether a router of kind has the RouterABI function name.
func routerReads(kind ContractKind, name string) bool {
	return slices.Contains(routerFunctions[kind], name)
}

// payment decodes the router's payment helpers: they pay out what the router holds.
func (u *uni) payment(act *actions.Action, name string, vals []any) {
	act.Notional = []actions.Amount{}
	switch name {
	case "unwrapWETH9", "unwrapWETH90":
		rcpt := u.sender
		if len(vals) == 2 {
			rcpt = vals[1].(common.Address)
		}
		act.Kind = "uniswap.unwrapWETH9"
		act.Recipients, act.Assets = []common.Address{rcpt}, []common.Address{actions.NativeAsset}
		act.Fields["amountMinimum"] = vals[0].(*big.Int).String()
	case "sweepToken", "sweepToken0":
		rcpt := u.sender
		if len(vals) == 3 {
			rcpt = vals[2].(common.Address)
		}
		token := vals[0].(common.Address)
		act.Kind = "uniswap.sweepToken"
		act.Recipients, act.Assets = []common.Address{rcpt}, []common.Address{token}
		act.Fields["amountMinimum"] = vals[1].(*big.Int).String()
	default:
		act.Kind = "uniswap.refundETH"
		act.Recipients, act.Assets = []common.Address{u.sender}, []common.Address{actions.NativeAsset}
	}
}

// v3Single is the params of a V3 exactInputSingle or exactOutputSingle.
type v3Single struct {
	tokenIn, tokenOut, recipient common.Address
	fee, sqrtPriceLimitX96       string // in decimal
	// amount is amountIn (exact input) or amountOut (exact output); limit is
	// amountOutMinimum or amountInMaximum.
	amount, limit *big.Int
}

// isSingle reports whether name is exactInputSingle or exactOutputSingle.
func isSingle(name string) bool {
	return name == "exactInputSingle" || name == "exactOutputSingle"
}

// exactIn reports whether name, one of isSingle's, is the exact-input one.
func exactIn(name string) bool { return name[:10] == "exactInput" }

// readsInPlace fills single from the call data to m, a single swap, when its params read in
// place (evmcall.StaticTuple).
func readsInPlace(m *abi.Method, data []byte, single *v3Single) bool {
	st, ok := evmcall.ReadStaticTuple(m, data[4:])
	if ok {
		*single = singleFromWords(st, m.RawName)
	}
	return ok
}

// singleFromWords reads the params of the single swap name from their words.
func singleFromWords(st evmcall.StaticTuple, name string) v3Single {
	s := v3Single{tokenIn: st.Address("tokenIn"), tokenOut: st.Address("tokenOut"), recipient: st.Address("recipient"),
		fee: st.Decimal("fee"), sqrtPriceLimitX96: st.Decimal("sqrtPriceLimitX96")}
	if exactIn(name) {
		s.amount, s.limit = st.BigInt("amountIn"), st.BigInt("amountOutMinimum")
	} else {
		s.amount, s.limit = st.BigInt("amountOut"), st.BigInt("amountInMaximum")
	}
	return s
}

// singleFromTuple reads the params of the single swap name from go-ethereum's unpacked tuple.
func singleFromTuple(p any, name string) *v3Single {
	s := &v3Single{tokenIn: member[common.Address](p, "TokenIn"), tokenOut: member[common.Address](p, "TokenOut"),
		recipient: member[common.Address](p, "Recipient"),
		fee:       member[*big.Int](p, "Fee").String(), sqrtPriceLimitX96: member[*big.Int](p, "SqrtPriceLimitX96").String()}
	if exactIn(name) {
		s.amount, s.limit = member[*big.Int](p, "AmountIn"), member[*big.Int](p, "AmountOutMinimum")
	} else {
		s.amount, s.limit = member[*big.Int](p, "AmountOut"), member[*big.Int](p, "AmountInMaximum")
	}
	return s
}

// swap fills act from a V2 or V3 swap: vals are its unpacked arguments, or single holds
// the params of a single V3 swap read in place (evmcall.StaticTuple).
func (u *uni) swap(act *actions.Action, name string, vals []any, single *v3Single) *actions.DecodeError {
	t := u.scratch.Trade()
	t.Kind = actions.TradeSwap
	var tokens []common.Address
	var rcpt common.Address
	ethIn, ethOut := false, false
	placeholders := false // SwapRouter02: address(1) and address(2); SwapRouter: address(0) is the router
	switch name {
	case "swapExactTokensForTokens", "swapExactTokensForTokensSupportingFeeOnTransferTokens", "swapExactTokensForTokens0",
		"swapExactTokensForETH", "swapExactTokensForETHSupportingFeeOnTransferTokens":
		t.AmountIn, t.MinOut = vals[0].(*big.Int), vals[1].(*big.Int)
		tokens, rcpt = vals[2].([]common.Address), vals[3].(common.Address)
		placeholders = name == "swapExactTokensForTokens0"
		ethOut = name == "swapExactTokensForETH" || name == "swapExactTokensForETHSupportingFeeOnTransferTokens"
		act.Kind = "uniswap.v2." + trimDigit(name)
	case "swapTokensForExactTokens", "swapTokensForExactTokens0", "swapTokensForExactETH":
		t.ExactOut, t.AmountOut, t.MaxIn = true, vals[0].(*big.Int), vals[1].(*big.Int)
		tokens, rcpt = vals[2].([]common.Address), vals[3].(common.Address)
		placeholders = name == "swapTokensForExactTokens0"
		ethOut = name == "swapTokensForExactETH"
		act.Kind = "uniswap.v2." + trimDigit(name)
	case "swapExactETHForTokens", "swapExactETHForTokensSupportingFeeOnTransferTokens":
		t.AmountIn, t.MinOut = u.value, vals[0].(*big.Int)
		tokens, rcpt = vals[1].([]common.Address), vals[2].(common.Address)
		ethIn = true
		act.Kind = "uniswap.v2." + name
	case "swapETHForExactTokens":
		t.ExactOut, t.AmountOut, t.MaxIn = true, vals[0].(*big.Int), u.value
		tokens, rcpt = vals[1].([]common.Address), vals[2].(common.Address)
		ethIn = true
		act.Kind = "uniswap.v2." + name
	case "exactInputSingle", "exactInputSingle0", "exactOutputSingle", "exactOutputSingle0":
		p := single
		if p == nil {
			p = singleFromTuple(vals[0], name)
		}
		tokens = []common.Address{p.tokenIn, p.tokenOut}
		rcpt = p.recipient
		placeholders = name[len(name)-1] == '0'
		act.Kind = "uniswap.v3." + trimDigit(name)
		act.Fields["fee"] = p.fee
		act.Fields["sqrtPriceLimitX96"] = p.sqrtPriceLimitX96
		t.PriceLimited = sqrtPriceLimited(p.sqrtPriceLimitX96)
		if exactIn(name) {
			t.AmountIn, t.MinOut = p.amount, p.limit
		} else {
			t.ExactOut, t.AmountOut, t.MaxIn = true, p.amount, p.limit
		}
	case "exactInput", "exactInput0", "exactOutput", "exactOutput0":
		p := vals[0]
		path, fees, ok := v3Path(member[[]byte](p, "Path"))
		if !ok {
			return actions.Fail("data", "a V3 path must be token (fee token)+, 2 to 8 tokens")
		}
		tokens, rcpt = path, member[common.Address](p, "Recipient")
		placeholders = name[len(name)-1] == '0'
		act.Kind = "uniswap.v3." + trimDigit(name)
		act.Fields["fees"] = fees
		if name[:10] == "exactInput" {
			t.AmountIn, t.MinOut = member[*big.Int](p, "AmountIn"), member[*big.Int](p, "AmountOutMinimum")
		} else {
			// docs/policy.md#uniswap: an exact-output path runs from the output back to the input.
			slices.Reverse(tokens)
			t.ExactOut, t.AmountOut, t.MaxIn = true, member[*big.Int](p, "AmountOut"), member[*big.Int](p, "AmountInMaximum")
		}
	default:
		return actions.Fail("data", name+" is not a swap this decoder reads")
	}
	if len(tokens) < 2 || len(tokens) > 8 {
		return actions.Fail("data", "a path must name 2 to 8 tokens")
	}
	if placeholders && !t.ExactOut && t.AmountIn != nil && t.AmountIn.Sign() == 0 {
		// SwapRouter02: 0 is the router's whole balance, counted where it came in.
		t.AmountIn, act.Notional = nil, []actions.Amount{}
	}
	switch {
	case placeholders && rcpt == MsgSender:
		rcpt = u.sender
	case placeholders && rcpt == AddressThis:
		rcpt = u.router
	case !placeholders && rcpt == (common.Address{}) && strings.HasPrefix(act.Kind, "uniswap.v3."):
		rcpt = u.router // SwapRouter: address(0) keeps the output in the router
	}
	t.AssetIn, t.AssetOut = tokens[0], tokens[len(tokens)-1]
	if ethIn {
		t.AssetIn = actions.NativeAsset // the V2 ETH variants: msg.value is the input
	}
	if ethOut {
		t.AssetOut = actions.NativeAsset
	}
	t.Side = evmcall.SwapSide(u.chainID, t.AssetIn, t.AssetOut)
	act.Trade = t
	act.Assets = slices.Compact(append([]common.Address{}, tokens...))
	if t.AssetIn == actions.NativeAsset || t.AssetOut == actions.NativeAsset {
		act.Assets = actions.AppendNew(act.Assets, actions.NativeAsset)
	}
	if rcpt != u.router {
		act.Recipients = []common.Address{rcpt}
	}
	act.Fields["recipient"] = rcpt
	act.Fields["path"] = tokens
	return nil
}

// settle follows what the router holds across the legs of bundle: a swap whose output
// stays in the router must be paid out by a later unwrapWETH9 or sweepToken, or spent by a
// later swap from the router's balance; otherwise the output is stranded in the router
// (docs/policy.md#uniswap).
func (u *uni) settle(bundle *actions.Action) {
	held := map[common.Address]bool{}
	for _, l := range bundle.Legs {
		switch {
		case l.Trade != nil:
			if l.Trade.AmountIn == nil && !l.Trade.ExactOut {
				delete(held, l.Trade.AssetIn)
			}
			if len(l.Recipients) == 0 {
				held[l.Trade.AssetOut] = true
			}
		case l.Kind == "uniswap.sweepToken":
			delete(held, l.Assets[0])
		case l.Kind == "uniswap.unwrapWETH9":
			w, known := evmcall.WrappedNative(u.chainID)
			for a := range held {
				if !known || a == w {
					delete(held, a)
				}
			}
		}
	}
	if len(held) > 0 {
		target := bundle
		if bundle.Kind == "" { // a lone call: the bundle is only a wrapper
			target = bundle.Legs[0]
		}
		target.Stranded = []common.Address{u.router}
	}
}

// v3Path splits a V3 path, token (fee token)+, into its tokens and fees.
func v3Path(p []byte) ([]common.Address, []int64, bool) {
	if len(p) < 43 || (len(p)-20)%23 != 0 || len(p) > 20+7*23 {
		return nil, nil, false
	}
	tokens := []common.Address{common.BytesToAddress(p[:20])}
	var fees []int64
	for i := 20; i < len(p); i += 23 {
		fees = append(fees, int64(p[i])<<16|int64(p[i+1])<<8|int64(p[i+2]))
		tokens = append(tokens, common.BytesToAddress(p[i+3:i+23]))
	}
	return tokens, fees, true
}

// member reads a named member of an unpacked ABI tuple.
func member[T any](tuple any, name string) T {
	var zero T
	rv := reflect.ValueOf(tuple)
	if rv.Kind() != reflect.Struct {
		return zero
	}
	f := rv.FieldByName(name)
	if !f.IsValid() {
		return zero
	}
	v, _ := f.Interface().(T)
	return v
}

func trimDigit(name string) string {
	if n := len(name); n > 0 && name[n-1] >= '0' && name[n-1] <= '9' {
		return name[:n-1]
	}
	return name
}

func itoa(i int) string { return strconv.Itoa(i) }

// reflectSlice returns the elements of an unpacked ABI array.
func reflectSlice(v any) []any {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice {
		return nil
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out
}

// The bounds of a V3 pool's sqrt price (TickMath): a sqrtPriceLimitX96 at or beyond them
// limits nothing, and 0 is none (the router then swaps to the bound).
var (
	MinSqrtRatio    = big.NewInt(4295128739)
	MaxSqrtRatio, _ = new(big.Int).SetString("1461446703485210103287273052203988822378723970342", 10)
)

// sqrtPriceLimited reports whether a V3 swap's sqrtPriceLimitX96 (in decimal) limits its
// price: strictly between MIN_SQRT_RATIO+1 and MAX_SQRT_RATIO-1.
func sqrtPriceLimited(decimal string) bool {
	if decimal == "0" {
		return false
	}
	v, ok := new(big.Int).SetString(decimal, 10)
	if !ok {
		return false
	}
	lo := new(big.Int).Add(MinSqrtRatio, big.NewInt(1))
	hi := new(big.Int).Sub(MaxSqrtRatio, big.NewInt(1))
	return v.Cmp(lo) > 0 && v.Cmp(hi) < 0
}

var (
	_ actions.ScratchDecoder = Decoder{}
	_ actions.SenderDecoder  = Decoder{}
)
