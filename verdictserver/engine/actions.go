package engine

import (
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
)

// The action model and the decoders' contract are package actions, which the decoders build
// on (docs/policy.md#actions); these are their names in the engine's API (Deps.Decoders).
type (
	// Decoder is actions.Decoder: it turns the proposedTx of one protocol into an Action.
	Decoder = actions.Decoder
	// SenderDecoder is actions.SenderDecoder: a Decoder whose actions depend on the sender.
	SenderDecoder = actions.SenderDecoder
	// DecodeError is actions.DecodeError: a proposedTx a decoder could not read.
	DecodeError = actions.DecodeError
	// Action is actions.Action: what the checks read.
	Action = actions.Action
	// Amount is actions.Amount: a quantity of a token in base units.
	Amount = actions.Amount
	// CoinAmount is actions.CoinAmount: a quantity of a Hyperliquid coin.
	CoinAmount = actions.CoinAmount
	// Allowance is actions.Allowance: an allowance an action grants.
	Allowance = actions.Allowance
	// Trade is actions.Trade: the trade fields that swaps and orders share.
	Trade = actions.Trade
	// KnownContract is uniswap.KnownContract: a contract a protocol decoder reads calls to
	// (Deps.Contracts).
	KnownContract = uniswap.KnownContract
)

// NativeAsset is actions.NativeAsset: a chain's native coin wherever an asset address is
// needed.
var NativeAsset = actions.NativeAsset

// The kinds and sides of a Trade (actions.TradeSwap …).
const (
	TradeSwap     = actions.TradeSwap
	TradeOrder    = actions.TradeOrder
	TradeLeverage = actions.TradeLeverage
	SideBuy       = actions.SideBuy
	SideSell      = actions.SideSell
	SideLong      = actions.SideLong
	SideShort     = actions.SideShort
)
