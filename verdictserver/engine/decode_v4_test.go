package engine

import (
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
)

// v4 parameter structs, as v4-periphery's IV4Router declares them.
type poolKey struct {
	Currency0, Currency1 common.Address
	Fee                  *big.Int
	TickSpacing          *big.Int
	Hooks                common.Address
}
type v4InSingle struct {
	PoolKey          poolKey
	ZeroForOne       bool
	AmountIn         *big.Int
	AmountOutMinimum *big.Int
	MinHopPriceX36   *big.Int
	HookData         []byte
}
type pathKey struct {
	IntermediateCurrency common.Address
	Fee                  *big.Int
	TickSpacing          *big.Int
	Hooks                common.Address
	HookData             []byte
}
type v4OutMulti struct {
	CurrencyOut     common.Address
	Path            []pathKey
	AmountOut       *big.Int
	AmountInMaximum *big.Int
}

func tupleOf(t testing.TB, comps ...abi.ArgumentMarshaling) abi.Arguments {
	ty, err := abi.NewType("tuple", "", comps)
	if err != nil {
		t.Fatal(err)
	}
	return abi.Arguments{{Type: ty}}
}

func am(name, typ string, sub ...abi.ArgumentMarshaling) abi.ArgumentMarshaling {
	return abi.ArgumentMarshaling{Name: name, Type: typ, Components: sub}
}

var testPoolKey = am("poolKey", "tuple", am("currency0", "address"), am("currency1", "address"), am("fee", "uint24"), am("tickSpacing", "int24"), am("hooks", "address"))

// v4InSingleParams encodes ExactInputSingleParams, with minHopPriceX36 for router 2.1.1.
func v4InSingleParams(t testing.TB, p v4InSingle, hop bool) []byte {
	c := []abi.ArgumentMarshaling{testPoolKey, am("zeroForOne", "bool"), am("amountIn", "uint128"), am("amountOutMinimum", "uint128")}
	var v any = p
	if hop {
		c = append(c, am("minHopPriceX36", "uint256"))
	} else {
		v = struct {
			PoolKey          poolKey
			ZeroForOne       bool
			AmountIn         *big.Int
			AmountOutMinimum *big.Int
			HookData         []byte
		}{p.PoolKey, p.ZeroForOne, p.AmountIn, p.AmountOutMinimum, p.HookData}
	}
	b, err := tupleOf(t, append(c, am("hookData", "bytes"))...).Pack(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func v4OutMultiParams(t testing.TB, p v4OutMulti) []byte {
	b, err := tupleOf(t, am("currencyOut", "address"), am("path", "tuple[]", am("intermediateCurrency", "address"), am("fee", "uint24"),
		am("tickSpacing", "int24"), am("hooks", "address"), am("hookData", "bytes")), am("amountOut", "uint128"), am("amountInMaximum", "uint128")).Pack(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func v4Swap(t testing.TB, actions []byte, params ...[]byte) []byte {
	return encode(t, []string{"bytes", "bytes[]"}, actions, params)
}

// TestV4SwapGolden is the golden table of the Universal Router's V4_SWAP command
// (docs/policy.md#universal-router).
func TestV4SwapGolden(t *testing.T) {
	e := newEngine(t, Config{}, Deps{})
	key := poolKey{usdc, weth, big.NewInt(500), big.NewInt(10), common.Address{}}
	buy := func(min *big.Int, hooks common.Address) []byte {
		k := key
		k.Hooks = hooks
		return v4InSingleParams(t, v4InSingle{k, true, e6(3000), min, new(big.Int), nil}, true)
	}
	settleAll := encode(t, []string{"address", "uint256"}, usdc, e6(3000))
	takeAll := encode(t, []string{"address", "uint256"}, weth, milli18(995))
	take := func(to common.Address) []byte {
		return encode(t, []string{"address", "address", "uint256"}, weth, to, new(big.Int))
	}
	ur := func(router common.Address, v4in []byte, value *big.Int) map[string]any {
		return evmTx("uniswap", 84532, router, execute(t, []byte{uniswap.CmdV4Swap}, v4in), value)
	}
	ethIn := v4OutMultiParams(t, v4OutMulti{usdc, []pathKey{{common.Address{}, big.NewInt(500), big.NewInt(10), common.Address{}, nil}}, e6(3000), milli18(1005)})
	rows := []golden{
		{"UR 2.1.1 V4: an exact-in single swap, settled and taken by the agent", uniPolicy,
			ur(urV21, v4Swap(t, []byte{uniswap.V4SwapExactInSingle, uniswap.V4SettleAll, uniswap.V4TakeAll}, buy(milli18(995), common.Address{}), settleAll, takeAll), nil),
			verdict.ReasonAllowed, "", nil, st{"recipient": cP, "slippage_guard": cP, "side": cP, "per_tx_cap": cP}, ""},
		{"UR 2.1.1 V4: the output taken to a sanctioned address", uniOpen,
			ur(urV21, v4Swap(t, []byte{uniswap.V4SwapExactInSingle, uniswap.V4SettleAll, uniswap.V4Take}, buy(milli18(995), common.Address{}), settleAll, take(listed)), nil),
			verdict.ReasonSanctionedAddress, "", ids("sanctions"), nil, ""},
		{"UR 2.1.1 V4: a sanctioned hooks contract is screened", uniOpen,
			ur(urV21, v4Swap(t, []byte{uniswap.V4SwapExactInSingle, uniswap.V4SettleAll, uniswap.V4TakeAll}, buy(milli18(995), listed), settleAll, takeAll), nil),
			verdict.ReasonSanctionedAddress, "", ids("sanctions"), nil, ""},
		{"UR 2.1.1 V4: zero minimum out", uniPolicy,
			ur(urV21, v4Swap(t, []byte{uniswap.V4SwapExactInSingle, uniswap.V4SettleAll, uniswap.V4TakeAll}, buy(new(big.Int), common.Address{}), settleAll, takeAll), nil),
			verdict.ReasonNoSlippageGuard, "swaps.requireMinOut", ids("slippage_guard"), nil, ""},
		{"UR 2.1.1 V4: an action the decoder does not read (CLOSE_CURRENCY)", uniPolicy,
			ur(urV21, v4Swap(t, []byte{uniswap.V4SwapExactInSingle, 0x12}, buy(milli18(995), common.Address{}), encode(t, []string{"address"}, weth)), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},
		{"UR 2.1.1 V4: parameters without minHopPriceX36 are not 2.1.1's", uniPolicy,
			ur(urV21, v4Swap(t, []byte{uniswap.V4SwapExactInSingle, uniswap.V4SettleAll, uniswap.V4TakeAll}, v4InSingleParams(t, v4InSingle{key, true, e6(3000), milli18(995), nil, nil}, false), settleAll, takeAll), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},
		{"UR 2.0 V4: an exact-out sale of ETH paid from the call's value, counted once", uniPolicy,
			ur(urV20, v4Swap(t, []byte{uniswap.V4SwapExactOut, uniswap.V4SettleAll, uniswap.V4TakeAll}, ethIn, encode(t, []string{"address", "uint256"}, common.Address{}, milli18(1005)),
				encode(t, []string{"address", "uint256"}, usdc, e6(3000))), milli18(1005)),
			verdict.ReasonAllowed, "", nil, st{"side": cP, "slippage_guard": cP, "per_tx_cap": cP}, ""},
		{"UR 2.0 V4: the same ETH sale against buy-only", uniBuyOnly,
			ur(urV20, v4Swap(t, []byte{uniswap.V4SwapExactOut, uniswap.V4SettleAll, uniswap.V4TakeAll}, ethIn, encode(t, []string{"address", "uint256"}, common.Address{}, milli18(1005)),
				encode(t, []string{"address", "uint256"}, usdc, e6(3000))), milli18(1005)),
			verdict.ReasonSideNotAllowed, "trading.sides", ids("side"), nil, ""},
		{"UR 1.2 has no V4_SWAP: 0x10 is an NFT command there", uniOpen,
			evmTx("uniswap", 8453, urV12, execute(t, []byte{uniswap.CmdV4Swap}, v4Swap(t, []byte{uniswap.V4TakeAll}, takeAll)), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},
	}
	runGolden(t, e, rows)
	// The ETH sale's notional is its value (1.005 ETH at 3000 USD), not twice it.
	v := evaluate(t, e, rows[6])
	if v.USDNotional == nil || *v.USDNotional != 3015 {
		t.Errorf("usdNotional %v, want 3015", v.USDNotional)
	}
}
