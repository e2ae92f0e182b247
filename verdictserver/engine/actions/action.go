// Package actions is the policy engine's action model (docs/policy.md#actions): what each
// protocol's decoder builds from a proposedTx, and all that the engine's checks read. It also
// holds what the decoders share to build one: the Decoder contract, DecodeError, the readers
// of proposedTx members, and the Scratch memory the engine lends a decode.
package actions

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"
)

// NativeAsset stands for a chain's native coin (ETH) wherever an asset address is needed:
// in Assets, in a Trade, in the price table and in assets.universe (docs/policy.md#actions).
var NativeAsset = common.HexToAddress("0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE")

// Action is a decoded action: what the checks read (docs/policy.md#actions). A field a
// decoder leaves empty makes the checks that need it not_checked. The checks run over the
// action and every leg, recursively.
type Action struct {
	// Protocol is proposedTx.protocol.
	Protocol string
	// ChainID is the chain the action runs on, > 0.
	ChainID int64
	// Kind names the decoded shape, e.g. "x402.payment", "erc20.transfer".
	Kind string
	// Fields are further members of evidence.decodedAction (JSON values, or addresses:
	// common.Address and []common.Address are written EIP-55), e.g. payTo.
	Fields map[string]any
	// To is the contract the agent calls; nil when the action is not a contract call (a
	// Universal Router command, a typed-data action).
	To *common.Address
	// Selector is the 4-byte selector called on To ("0x" + 8 hex, or "0x" for none).
	Selector string
	// Recipients are the addresses value goes to (an approval's spender is one).
	Recipients []common.Address
	// Assets are the tokens the action moves (NativeAsset for the native coin).
	Assets []common.Address
	// Coins are the Hyperliquid coins the action trades or moves ("BTC", "@107", "USDC"),
	// checked against assets.hyperliquid (docs/policy.md#hyperliquid-actions).
	Coins []string
	// CoinAmounts are quantities of Hyperliquid coins the action moves, priced for
	// per_tx_cap: USDC at 1 USD, any other coin at its reference price.
	CoinAmounts []CoinAmount
	// Screen are further addresses to screen for sanctions, beside the escrow, To, the
	// recipients and the assets.
	Screen []common.Address
	// Stranded are addresses value is left at with no way back to a recipient (a router
	// that keeps a swap's output with no later sweep); sink_recipient fails on them.
	Stranded []common.Address
	// Notional is what the action moves, priced for per_tx_cap. When nil and Trade is set,
	// the notional comes from the trade (TradeNotional); a non-nil empty slice moves nothing.
	Notional []Amount
	// Trade is the trade the action makes, or nil.
	Trade *Trade
	// Allowances are the allowances the action grants (rendered as evidence "approvals").
	Allowances []Allowance
	// Legs are the calls or commands the action bundles (a multicall's calls, a Universal
	// Router plan's commands), each decoded as an Action of the same protocol and chain.
	Legs []*Action
}

// Amount is a quantity of a token in base units.
type Amount struct {
	Asset common.Address
	Value *big.Int
}

// CoinAmount is a quantity of a Hyperliquid coin, in whole units ("1.5" USDC).
type CoinAmount struct {
	Coin   string
	Amount *big.Rat
}

// Allowance is an allowance granted to Spender over Asset, inside an action (an ERC-20
// approve, an EIP-2612 or Permit2 permit): not the verdict that approves an action.
type Allowance struct {
	Spender common.Address
	Asset   common.Address
	// Amount is the allowance in base units.
	Amount *big.Int
	// Unlimited is set for an allowance of 2^256-1 (or any the token treats as infinite, such
	// as Permit2's 2^160-1). It is a reading of Amount: the allowance is priced at Amount
	// all the same (docs/policy.md#pricing).
	Unlimited bool
}

// The kinds of a Trade.
const (
	// TradeSwap exchanges AssetIn for AssetOut at once (an AMM swap).
	TradeSwap = "swap"
	// TradeOrder is an order on a market, at LimitPrice for Size.
	TradeOrder = "order"
	// TradeLeverage sets the leverage of a market (Leverage) and trades nothing.
	TradeLeverage = "leverage"
)

// The sides of a trade (trading.sides).
const (
	SideBuy   = "buy"
	SideSell  = "sell"
	SideLong  = "long"
	SideShort = "short"
)

// Trade is the trade fields that swaps and orders share, read by the side, slippage_guard,
// execution_price_bound, leverage and per_tx_cap checks (docs/policy.md#trades). A nil
// pointer is "none": a swap without MinOut has no slippage guard, an order without
// LimitPrice has no price bound.
type Trade struct {
	// Kind is TradeSwap, TradeOrder or TradeLeverage.
	Kind string
	// Side is buy or sell (a swap or a spot order), long or short (a perp order). A swap's
	// side is "" when it is both: it spends one non-quote asset for another.
	Side string
	// Market names what an order or a leverage change trades (a Hyperliquid coin, "BTC");
	// its reference price comes from Options.References.
	Market string

	// AssetIn and AssetOut are a swap's input and output tokens.
	AssetIn, AssetOut common.Address
	// AmountIn is an exact-input swap's input, in base units of AssetIn; nil when the
	// amount is not known before execution (a router's whole balance).
	AmountIn *big.Int
	// MinOut is an exact-input swap's minimum output, in base units of AssetOut.
	MinOut *big.Int
	// ExactOut marks an exact-output swap: AmountOut for at most MaxIn.
	ExactOut bool
	// AmountOut is an exact-output swap's output, in base units of AssetOut.
	AmountOut *big.Int
	// MaxIn is an exact-output swap's maximum input, in base units of AssetIn.
	MaxIn *big.Int
	// PriceLimited marks a swap that carries its own price limit beside its minimum out: a
	// V3 sqrtPriceLimitX96 inside the pool's bounds, or a Universal Router 2.1.1
	// minHopPriceX36 for every hop (swaps.requirePriceLimit).
	PriceLimited bool

	// LimitPrice is an order's limit price in USD per unit of Market; nil or zero is none.
	LimitPrice *big.Rat
	// Size is an order's size in units of Market.
	Size *big.Rat
	// Leverage is the leverage the action sets or that an order implies; nil when none.
	Leverage *big.Rat
	// ReduceOnly marks an order that can only shrink a position.
	ReduceOnly bool
}

// Walk calls fn on act and on every leg, depth first, to a bounded depth.
func (act *Action) Walk(fn func(*Action)) { act.walkDepth(fn, 0) }

// MaxLegDepth bounds nesting (a Universal Router sub-plan in a multicall …).
const MaxLegDepth = 8

func (act *Action) walkDepth(fn func(*Action), depth int) {
	if act == nil || depth > MaxLegDepth {
		return
	}
	fn(act)
	for _, l := range act.Legs {
		l.walkDepth(fn, depth+1)
	}
}
