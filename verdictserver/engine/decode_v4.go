package engine

import (
	"encoding/hex"
	"math/big"
	"strconv"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
)

// The Universal Router's V4_SWAP command (docs/policy.md#universal-router): its input is
// (bytes actions, bytes[] params), one Uniswap v4 router action per byte. The swap actions'
// parameters gained minHopPriceX36 with router 2.1.1.

const cmdV4Swap = 0x10

// The v4 router actions read (v4-periphery Actions.sol).
const (
	v4SwapExactInSingle  = 0x06
	v4SwapExactIn        = 0x07
	v4SwapExactOutSingle = 0x08
	v4SwapExactOut       = 0x09
	v4Settle             = 0x0b
	v4SettleAll          = 0x0c
	v4Take               = 0x0e
	v4TakeAll            = 0x0f
	v4TakePortion        = 0x10
)

var v4Names = map[byte]string{
	v4SwapExactInSingle: "SWAP_EXACT_IN_SINGLE", v4SwapExactIn: "SWAP_EXACT_IN", v4SwapExactOutSingle: "SWAP_EXACT_OUT_SINGLE",
	v4SwapExactOut: "SWAP_EXACT_OUT", v4Settle: "SETTLE", v4SettleAll: "SETTLE_ALL", v4Take: "TAKE", v4TakeAll: "TAKE_ALL",
	v4TakePortion: "TAKE_PORTION",
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
		v4SwapExactInSingle:  single("amountIn", "amountOutMinimum"),
		v4SwapExactIn:        multi("currencyIn", "amountIn", "amountOutMinimum"),
		v4SwapExactOutSingle: single("amountOut", "amountInMaximum"),
		v4SwapExactOut:       multi("currencyOut", "amountOut", "amountInMaximum"),
		v4Settle:             args("address", "uint256", "bool"),
		v4SettleAll:          args("address", "uint256"),
		v4TakeAll:            args("address", "uint256"),
		v4Take:               args("address", "address", "uint256"),
		v4TakePortion:        args("address", "address", "uint256"),
	}
}

var (
	v4Plain = v4Params(false)
	v4Hop   = v4Params(true)
)

// v4Swap decodes a V4_SWAP command's actions as legs of leg.
func (p *plan) v4Swap(leg *Action, in []byte, field string) *DecodeError {
	vals, err := unpack(urIn["subPlan"], in)
	if err != nil {
		return &DecodeError{Field: field, Problem: "V4_SWAP inputs: " + err.Error()}
	}
	actions, params := vals[0].([]byte), vals[1].([][]byte)
	if len(actions) == 0 || len(actions) > 32 || len(actions) != len(params) {
		return &DecodeError{Field: field, Problem: "V4_SWAP must carry 1 to 32 actions, one per parameter"}
	}
	table := v4Plain
	if p.v.hopPrices {
		table = v4Hop
	}
	for i, a := range actions {
		f := field + ".actions." + strconv.Itoa(i)
		name, ok := v4Names[a]
		if !ok {
			return &DecodeError{Field: f, Problem: "v4 action 0x" + hex.EncodeToString([]byte{a}) + " is not one this decoder reads"}
		}
		vals, err := unpack(table[a], params[i])
		if err != nil {
			return &DecodeError{Field: f, Problem: name + " parameters: " + err.Error()}
		}
		l, _ := p.scratch.Action()
		l.Protocol, l.ChainID, l.Kind, l.Notional = ProtocolUniswap, p.chainID, prefixed(pV4Leg, name).Val, []Amount{}
		l.Fields["action"] = byteText(a)
		if de := p.v4Action(l, a, vals, f); de != nil {
			return de
		}
		leg.Legs = append(leg.Legs, l)
	}
	return nil
}

func (p *plan) v4Action(l *Action, a byte, vals []any, field string) *DecodeError {
	switch a {
	case v4SwapExactInSingle, v4SwapExactOutSingle:
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
		*t = Trade{Kind: TradeSwap, AssetIn: in, AssetOut: out}
		if a == v4SwapExactInSingle {
			t.AmountIn, t.MinOut = member[*big.Int](s, "AmountIn"), member[*big.Int](s, "AmountOutMinimum")
		} else {
			t.ExactOut, t.AmountOut, t.MaxIn = true, member[*big.Int](s, "AmountOut"), member[*big.Int](s, "AmountInMaximum")
		}
		if p.v.hopPrices {
			t.PriceLimited = hopPricesLimited([]*big.Int{member[*big.Int](s, "MinHopPriceX36")}, 1)
		}
		p.v4Trade(l, t, []common.Address{in, out})
	case v4SwapExactIn, v4SwapExactOut:
		s := vals[0]
		hops := reflectSlice(member[any](s, "Path"))
		if len(hops) == 0 || len(hops) > 7 {
			return &DecodeError{Field: field, Problem: "a v4 path must have 1 to 7 hops"}
		}
		var tokens []common.Address
		for _, h := range hops {
			tokens = append(tokens, urToken(member[common.Address](h, "IntermediateCurrency")))
			if hk := member[common.Address](h, "Hooks"); hk != (common.Address{}) {
				l.Screen = actions.AppendNew(l.Screen, hk)
			}
		}
		t := p.scratch.Trade()
		t.Kind = TradeSwap
		if a == v4SwapExactIn {
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
	case v4SettleAll:
		cur, max := urToken(vals[0].(common.Address)), vals[1].(*big.Int)
		l.Assets = []common.Address{cur}
		if cur != NativeAsset { // the native coin is paid from the call's value, counted there
			l.Notional = []Amount{{Asset: cur, Value: max}}
		}
		l.Fields["maxAmount"] = max.String()
	case v4Settle:
		cur, amt, payerIsUser := urToken(vals[0].(common.Address)), vals[1].(*big.Int), vals[2].(bool)
		l.Assets = []common.Address{cur}
		l.Fields["amount"], l.Fields["payerIsUser"] = amt.String(), payerIsUser
		switch {
		case !payerIsUser:
			delete(p.held, cur)
		case cur == NativeAsset:
		case amt.Sign() == 0 || amt.Cmp(contractBalanc) == 0:
			l.Notional = []Amount{{Asset: cur, Value: nil}} // the whole debt: only known at execution
		default:
			l.Notional = []Amount{{Asset: cur, Value: amt}}
		}
	case v4TakeAll:
		cur := urToken(vals[0].(common.Address))
		l.Assets, l.Recipients = []common.Address{cur}, []common.Address{p.sender}
		l.Fields["minAmount"] = vals[1].(*big.Int).String()
	case v4Take, v4TakePortion:
		cur, rcpt := urToken(vals[0].(common.Address)), p.recipient(vals[1].(common.Address))
		l.Assets = []common.Address{cur}
		l.Fields["recipient"], l.Fields["amount"] = rcpt, vals[2].(*big.Int).String()
		p.pay(l, cur, rcpt)
	}
	return nil
}

// v4Trade fills a v4 swap leg: the pool manager settles it, so its notional is what
// SETTLE_ALL or SETTLE pays in.
func (p *plan) v4Trade(l *Action, t *Trade, tokens []common.Address) {
	if !t.ExactOut && t.AmountIn != nil && t.AmountIn.Sign() == 0 {
		t.AmountIn = nil // OPEN_DELTA: what earlier actions left
	}
	t.Side = swapSide(p.chainID, t.AssetIn, t.AssetOut)
	l.Trade = t
	l.Assets = append([]common.Address{}, tokens...)
}
