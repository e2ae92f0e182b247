package engine

import (
	"encoding/hex"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// Decoder turns the proposedTx of one protocol into an Action. Decode must refuse, with a
// *DecodeError, anything it does not fully understand (docs/policy.md#default-deny).
type Decoder interface {
	// Protocol is the proposedTx.protocol this decoder reads, e.g. "payment".
	Protocol() string
	// Decode reads tx, whose "protocol" is Protocol().
	Decode(tx map[string]any) (*Action, error)
}

// SenderDecoder is a Decoder whose actions depend on who sends them: an EVM router's
// address(1) placeholder is msg.sender, the agent's wallet (Input.Escrow). The engine calls
// DecodeFor instead of Decode when a decoder has it.
type SenderDecoder interface {
	Decoder
	DecodeFor(tx map[string]any, sender common.Address) (*Action, error)
}

// actionScratch is memory for the Actions a decoder builds, which it takes instead of
// allocating them when the engine decodes: the evaluation that owns the scratch drops the
// action when it ends (the verdict copies what it reports), and the next evaluation reuses
// the structs and the Fields maps, cleared (bench/engine.md#the-margin-2026-11-23-session-7). Only those are
// reused, never a value stored in them. The first scratchActions actions of a decode come
// from it, any further ones are allocated.
type actionScratch struct {
	acts   [scratchActions]Action
	to     [scratchActions]common.Address
	trades [scratchActions]Trade
	fields [scratchActions]map[string]any
	n      int // actions handed out
	nt     int // trades handed out
	// calldata is the decoded call data of an EVM call: no Action keeps a part of it (they
	// hold addresses, integers and strings, copied out of it).
	calldata []byte
	// added are the contracts the evaluation's policy adds to the registry (knownContracts),
	// or nil: read only, the policy's own.
	added map[string]map[string]string
}

// maxScratchCalldata bounds the call data buffer a scratch keeps.
const maxScratchCalldata = 4 << 10

// hexBytes decodes the hex digits h, into scratch's buffer when scratch is not nil and the
// bytes fit maxScratchCalldata.
func hexBytes(h string, scratch *actionScratch) ([]byte, error) {
	n := len(h) / 2
	if scratch == nil || n > maxScratchCalldata {
		return hex.DecodeString(h)
	}
	if cap(scratch.calldata) < n {
		scratch.calldata = make([]byte, n, max(n, 512))
	}
	b := scratch.calldata[:n]
	for i := range b {
		hi, ok1 := unhex(h[2*i])
		lo, ok2 := unhex(h[2*i+1])
		if !ok1 || !ok2 {
			return nil, hex.InvalidByteError(h[2*i])
		}
		b[i] = hi<<4 | lo
	}
	return b, nil
}

// knownAt is the contract the registry r or, beside it, the policy of s's evaluation knows at
// addr on chainID (docs/policy.md#known-contracts): a built-in or configured contract is never
// redefined by a policy.
func (s *actionScratch) knownAt(r registry, chainID int64, addr common.Address) (known, bool) {
	if k, ok := r.lookup(chainID, addr); ok {
		return k, true
	}
	if s == nil || s.added == nil {
		return known{}, false
	}
	return policyContract(s.added, chainID, addr)
}

// scratchDecoder is a Decoder that can decode into an actionScratch.
type scratchDecoder interface {
	decodeInto(tx map[string]any, sender common.Address, s *actionScratch) (*Action, error)
}

const (
	// scratchActions is the actions a scratch holds: a call, or an order and its leg, and
	// the legs of a small bundle.
	scratchActions = 4
	// maxScratchFields bounds the Fields map a scratch keeps for the next evaluation.
	maxScratchFields = 16
)

// action is a cleared Action with an empty Fields map, and where its To may point: s's
// memory, or new memory when s is nil or used up.
func (s *actionScratch) action() (*Action, *common.Address) {
	if s == nil || s.n == scratchActions {
		return &Action{Fields: make(map[string]any, 8)}, new(common.Address)
	}
	i := s.n
	s.n++
	if s.fields[i] == nil {
		s.fields[i] = make(map[string]any, 8)
	}
	clear(s.fields[i]) // empty already when the evaluation released it
	s.acts[i] = Action{Fields: s.fields[i]}
	return &s.acts[i], &s.to[i]
}

// callAction is an Action of protocol on chainID calling selector on to, with an empty
// Fields map (action).
func (s *actionScratch) callAction(protocol string, chainID int64, to common.Address, selector string) *Action {
	act, at := s.action()
	*at = to
	act.Protocol, act.ChainID, act.To, act.Selector = protocol, chainID, at, selector
	return act
}

// trade is a zero Trade: s's memory, or new memory when s is nil or used up.
func (s *actionScratch) trade() *Trade {
	if s == nil || s.nt == scratchActions {
		return new(Trade)
	}
	t := &s.trades[s.nt]
	s.nt++
	*t = Trade{}
	return t
}

// reset drops what the scratch's actions refer to, for the next evaluation: a Fields map
// that grew past maxScratchFields is let go.
func (s *actionScratch) reset() {
	for i := range s.n {
		if len(s.fields[i]) > maxScratchFields {
			s.fields[i] = nil
		}
		clear(s.fields[i])
	}
	clear(s.acts[:s.n])
	clear(s.trades[:s.nt])
	s.n, s.nt, s.added = 0, 0, nil
}

// DecodeError is a proposedTx a decoder could not read: the field at fault, as a dotted
// path from the request ("proposedTx.amount"), and why.
type DecodeError struct {
	Field   string
	Problem string
}

// Error returns "field: problem".
func (e *DecodeError) Error() string { return e.Field + ": " + e.Problem }

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

// Reference is a market's reference price: what execution_price_bound measures an order's
// limit price against.
type Reference struct {
	// Price is the USD price of one unit of the market, > 0.
	Price *big.Rat
	// Source names where it came from, for evidence.sources ("hyperliquid.mark").
	Source string
	// AsOf is when it was observed.
	AsOf time.Time
	// Cached is set when the price is older than its source's freshness bound.
	Cached bool
}

// ReferencePrices gives the reference price of a Trade.Market (a Hyperliquid coin's mark
// price). It must not block for long: it is called on the evaluation path.
type ReferencePrices interface {
	ReferencePrice(protocol string, chainID int64, market string) (Reference, bool)
}

// walk calls fn on act and on every leg, depth first, to a bounded depth.
func (act *Action) walk(fn func(*Action)) { act.walkDepth(fn, 0) }

// maxLegDepth bounds nesting (a Universal Router sub-plan in a multicall …).
const maxLegDepth = 8

func (act *Action) walkDepth(fn func(*Action), depth int) {
	if act == nil || depth > maxLegDepth {
		return
	}
	fn(act)
	for _, l := range act.Legs {
		l.walkDepth(fn, depth+1)
	}
}
