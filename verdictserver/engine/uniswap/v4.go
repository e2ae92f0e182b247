package uniswap

import (
	"encoding/hex"
	"math/big"
	"strconv"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/evmcall"
)

// The Universal Router's V4_SWAP command (docs/policy.md#universal-router): its input is
// (bytes actions, bytes[] params), one Uniswap v4 router action per byte. The swap actions'
// parameters gained minHopPriceX36 with router 2.1.1.

// CmdV4Swap is the V4_SWAP command.
const CmdV4Swap = 0x10

// The v4 router actions read (v4-periphery Actions.sol).
const (
	V4SwapExactInSingle  = 0x06
	V4SwapExactIn        = 0x07
	V4SwapExactOutSingle = 0x08
	V4SwapExactOut       = 0x09
	V4Settle             = 0x0b
	V4SettleAll          = 0x0c
	V4Take               = 0x0e
	V4TakeAll            = 0x0f
	V4TakePortion        = 0x10
)

var v4Names = map[byte]string{
	V4SwapExactInSingle: "SWAP_EXACT_IN_SINGLE", V4SwapExactIn: "SWAP_EXACT_IN", V4SwapExactOutSingle: "SWAP_EXACT_OUT_SINGLE",
	V4SwapExactOut: "SWAP_EXACT_OUT", V4Settle: "SETTLE", V4SettleAll: "SETTLE_ALL", V4Take: "TAKE", V4TakeAll: "TAKE_ALL",
	V4TakePortion: "TAKE_PORTION",
}

func comp(name, typ string, sub ...abi.ArgumentMarshaling) abi.ArgumentMarshaling {
	return abi.ArgumentMarshaling{Name: name, Type: typ, Components: sub}
}

// v4Params builds the swap parameter structs, with or without minHopPriceX36.
func v4Params(hop bool) map[byte]abi.Arguments {
	poolKey := comp("poolKey", "tuple", comp("currency0", "address"), comp("currency1", "address"), comp("fee", "uint24"),
		comp("tickSpacing", "int24"), comp("hooks", "address"))
	path := comp("path", "tuple[]", comp("intermediateCurrency", "address"), comp("fee", "uint24"), comp("tickSpacing", "int24"),
		comp("hooks", "address"), comp("hookData", "bytes"))
	single := func(a, b string) abi.Arguments {
		c := []abi.ArgumentMarshaling{poolKey, comp("zeroForOne", "bool"), comp(a, "uint128"), comp(b, "uint128")}
		if hop {
			c = append(c, comp("minHopPriceX36", "uint256"))
		}
		return abi.Arguments{tupleArg("tuple", append(c, comp("hookData", "bytes"))...)}
	}
	multi := func(cur, a, b string) abi.Arguments {
		c := []abi.ArgumentMarshaling{comp(cur, "address"), path}
		if hop {
			c = append(c, comp("minHopPriceX36", "uint256[]"))
		}
		return abi.Arguments{tupleArg("tuple", append(c, comp(a, "uint128"), comp(b, "uint128"))...)}
	}
	return map[byte]abi.Arguments{
		V4SwapExactInSingle:  single("amountIn", "amountOutMinimum"),
		V4SwapExactIn:        multi("currencyIn", "amountIn", "amountOutMinimum"),
		V4SwapExactOutSingle: single("amountOut", "amountInMaximum"),
		V4SwapExactOut:       multi("currencyOut", "amountOut", "amountInMaximum"),
		V4Settle:             args("address", "uint256", "bool"),
		V4SettleAll:          args("address", "uint256"),
		V4TakeAll:            args("address", "uint256"),
		V4Take:               args("address", "address", "uint256"),
		V4TakePortion:        args("address", "address", "uint256"),
	}
}

var (
	v4Plain = v4Params(false)
	v4Hop   = v4Params(true)
)

// v4Swap decodes a V4_SWAP command's actions as legs of leg.
func (p *plan) v4Swap(leg *actions.Action, in []byte, field string) *actions.DecodeError {
	vals, err := evmcall.Unpack(urIn["subPlan"], in)
	if err != nil {
		return &actions.DecodeError{Field: field, Problem: "V4_SWAP inputs: " + err.Error()}
	}
	acts, params := vals[0].([]byte), vals[1].([][]byte)
	if len(acts) == 0 || len(acts) > 32 || len(acts) != len(params) {
		return &actions.DecodeError{Field: field, Problem: "V4_SWAP must carry 1 to 32 actions, one per parameter"}
	}
	table := v4Plain
	if p.v.hopPrices {
		table = v4Hop
	}
	for i, a := range acts {
		f := field + ".actions." + strconv.Itoa(i)
		name, ok := v4Names[a]
		if !ok {
			return &actions.DecodeError{Field: f, Problem: "v4 action 0x" + hex.EncodeToString([]byte{a}) + " is not one this decoder reads"}
		}
		vals, err := evmcall.Unpack(table[a], params[i])
		if err != nil {
			return &actions.DecodeError{Field: f, Problem: name + " parameters: " + err.Error()}
		}
		l, _ := p.scratch.Action()
		l.Protocol, l.ChainID, l.Kind, l.Notional = Protocol, p.chainID, legKind(v4Leg, name), []actions.Amount{}
		l.Fields["action"] = byteText(a)
		if de := p.v4Action(l, a, vals, f); de != nil {
			return de
		}
		leg.Legs = append(leg.Legs, l)
	}
	return nil
}

func (p *plan) v4Action(l *actions.Action, a byte, vals []any, field string) *actions.DecodeError {
	switch a {
	case V4SwapExactInSingle, V4SwapExactOutSingle:
		s := vals[0]
		key := member[any](s, "PoolKey")
		c0, c1 := urToken(member[common.Address](key, "Currency0")), urToken(member[common.Address](key, "Currency1"))
		in, out := c0, c1
		if !member[bool](s, "ZeroForOne") {
			in, out = c1, c0
		}
		if h := member[common.Address](key, "Hooks"); h != (common.Address{}) {
			l.Screen = append(l.Screen, h)
			l.Fields["hooks"] = h
		}
		t := p.scratch.Trade()
		*t = actions.Trade{Kind: actions.TradeSwap, AssetIn: in, AssetOut: out}
		if a == V4SwapExactInSingle {
			t.AmountIn, t.MinOut = member[*big.Int](s, "AmountIn"), member[*big.Int](s, "AmountOutMinimum")
		} else {
			t.ExactOut, t.AmountOut, t.MaxIn = true, member[*big.Int](s, "AmountOut"), member[*big.Int](s, "AmountInMaximum")
		}
		if p.v.hopPrices {
			t.PriceLimited = hopPricesLimited([]*big.Int{member[*big.Int](s, "MinHopPriceX36")}, 1)
		}
		p.v4Trade(l, t, []common.Address{in, out})
	case V4SwapExactIn, V4SwapExactOut:
		s := vals[0]
		hops := reflectSlice(member[any](s, "Path"))
		if len(hops) == 0 || len(hops) > 7 {
			return &actions.DecodeError{Field: field, Problem: "a v4 path must have 1 to 7 hops"}
		}
		var tokens []common.Address
		for _, h := range hops {
			tokens = append(tokens, urToken(member[common.Address](h, "IntermediateCurrency")))
			if hk := member[common.Address](h, "Hooks"); hk != (common.Address{}) {
				l.Screen = actions.AppendNew(l.Screen, hk)
			}
		}
		t := p.scratch.Trade()
		t.Kind = actions.TradeSwap
		if a == V4SwapExactIn {
			tokens = append([]common.Address{urToken(member[common.Address](s, "CurrencyIn"))}, tokens...)
			t.AmountIn, t.MinOut = member[*big.Int](s, "AmountIn"), member[*big.Int](s, "AmountOutMinimum")
		} else {
			// The path runs from the input to the hop before currencyOut.
			tokens = append(tokens, urToken(member[common.Address](s, "CurrencyOut")))
			t.ExactOut, t.AmountOut, t.MaxIn = true, member[*big.Int](s, "AmountOut"), member[*big.Int](s, "AmountInMaximum")
		}
		t.AssetIn, t.AssetOut = tokens[0], tokens[len(tokens)-1]
		if p.v.hopPrices {
			t.PriceLimited = hopPricesLimited(member[[]*big.Int](s, "MinHopPriceX36"), len(hops))
		}
		p.v4Trade(l, t, tokens)
	case V4SettleAll:
		cur, max := urToken(vals[0].(common.Address)), vals[1].(*big.Int)
		l.Assets = []common.Address{cur}
		if cur != actions.NativeAsset { // the native coin is paid from the call's value, counted there
			l.Notional = []actions.Amount{{Asset: cur, Value: max}}
		}
		l.Fields["maxAmount"] = max.String()
	case V4Settle:
		cur, amt, payerIsUser := urToken(vals[0].(common.Address)), vals[1].(*big.Int), vals[2].(bool)
		l.Assets = []common.Address{cur}
		l.Fields["amount"], l.Fields["payerIsUser"] = amt.String(), payerIsUser
		switch {
		case !payerIsUser:
			delete(p.held, cur)
		case cur == actions.NativeAsset:
		case amt.Sign() == 0 || amt.Cmp(contractBalanc) == 0:
			l.Notional = []actions.Amount{{Asset: cur, Value: nil}} // the whole debt: only known at execution
		default:
			l.Notional = []actions.Amount{{Asset: cur, Value: amt}}
		}
	case V4TakeAll:
		cur := urToken(vals[0].(common.Address))
		l.Assets, l.Recipients = []common.Address{cur}, []common.Address{p.sender}
		l.Fields["minAmount"] = vals[1].(*big.Int).String()
	case V4Take, V4TakePortion:
		cur, rcpt := urToken(vals[0].(common.Address)), p.recipient(vals[1].(common.Address))
		l.Assets = []common.Address{cur}
		l.Fields["recipient"], l.Fields["amount"] = rcpt, vals[2].(*big.Int).String()
		p.pay(l, cur, rcpt)
	}
	return nil
}

// v4Trade fills a v4 swap leg: the pool manager settles it, so its notional is what
// SETTLE_ALL or SETTLE pays in.
func (p *plan) v4Trade(l *actions.Action, t *actions.Trade, tokens []common.Address) {
	if !t.ExactOut && t.AmountIn != nil && t.AmountIn.Sign() == 0 {
		t.AmountIn = nil // OPEN_DELTA: what earlier actions left
	}
	t.Side = evmcall.SwapSide(p.chainID, t.AssetIn, t.AssetOut)
	l.Trade = t
	l.Assets = append([]common.Address{}, tokens...)
}
