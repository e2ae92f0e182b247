// Package policy is the policy document of the verdict service (docs/policy.md#sections): its
// typed view, Document, and Parse, which validates an uploaded document against the JSON
// Schema in docs/ and the semantic rules of docs/policy.md#validation. A stored, versioned
// policy is a Policy; its version is the server's (docs/policy.md#versioning).
package policy

import "github.com/x402gate/x402gate/verdict"

// Policy is one stored policy version of an agent: the version the server assigned and the
// parsed document (docs/policy.md#versioning).
type Policy struct {
	// Version is the policy version, an integer that only grows per agent.
	Version int64
	// Doc is the parsed document; never nil in a Policy the store hands out.
	Doc *Document
}

// Document is the typed view of a policy document (docs/policy.md#sections). Every section
// is optional: a nil pointer, slice or map is an unconfigured constraint, which makes its
// check not_checked, except Venues and Chains, which grant (docs/policy.md#default-deny).
// Addresses and chain-id keys are kept as written, so that a dotted path built from them
// (contracts.8453.0x…) names the member the author wrote.
type Document struct {
	// Description is free text for people.
	Description string `json:"description,omitempty"`
	// Mode is how the checks apply (docs/policy.md#modes); default "" is enforce.
	Mode verdict.Mode `json:"mode,omitempty"`
	// Venues is venues.allowed.
	Venues *Venues `json:"venues,omitempty"`
	// Chains is chains.allowed.
	Chains *Chains `json:"chains,omitempty"`
	// Contracts is contracts.<chainId>.<address>: the selectors allowed on each contract.
	Contracts map[string]map[string][]string `json:"contracts,omitempty"`
	// KnownContracts is knownContracts.<chainId>.<address>: contracts the engine's protocol
	// decoders read calls to beside the built-in ones, each with its kind
	// ("uniswap.swapRouter02", "uniswap.universalRouter@2.1.1" …).
	KnownContracts map[string]map[string]string `json:"knownContracts,omitempty"`
	// Assets is assets.universe.<chainId> and assets.hyperliquid.
	Assets *Assets `json:"assets,omitempty"`
	// Recipients is recipients.allowed.
	Recipients *Recipients `json:"recipients,omitempty"`
	// Trading is trading.sides.
	Trading *Trading `json:"trading,omitempty"`
	// Swaps is swaps.requireMinOut, swaps.maxSlippageBps and swaps.requirePriceLimit.
	Swaps *Swaps `json:"swaps,omitempty"`
	// Orders is orders.requireLimitPrice and orders.maxPriceDeviationBps.
	Orders *Orders `json:"orders,omitempty"`
	// Perps is perps.maxLeverage.
	Perps *Perps `json:"perps,omitempty"`
	// Limits is limits.perTxUsd.
	Limits *Limits `json:"limits,omitempty"`
	// Sinks is sinks.extra.
	Sinks *Sinks `json:"sinks,omitempty"`
	// SpendWindows is spendWindows (docs/spend-windows.md); nil configures none.
	SpendWindows *SpendWindows `json:"spendWindows,omitempty"`
}

// Venues is the venues section.
type Venues struct {
	// Allowed lists the protocols the agent may use; nil allows none.
	Allowed []string `json:"allowed"`
}

// Chains is the chains section.
type Chains struct {
	// Allowed lists the chain ids the agent may act on; nil allows none.
	Allowed []int64 `json:"allowed"`
}

// Assets is the assets section.
type Assets struct {
	// Universe maps a chain id (decimal, as written) to the token addresses allowed there.
	Universe map[string][]string `json:"universe"`
	// Hyperliquid lists the Hyperliquid coins the agent may trade.
	Hyperliquid []string `json:"hyperliquid"`
}

// Recipients is the recipients section.
type Recipients struct {
	// Allowed lists addresses, or "self" for the agent's own wallet; nil is unconfigured.
	Allowed []string `json:"allowed"`
}

// Self is the recipients.allowed entry that stands for the agent's wallet (escrowAddress).
const Self = "self"

// Trading is the trading section.
type Trading struct {
	// Sides lists buy, sell, long and short.
	Sides []string `json:"sides"`
}

// Swaps is the swaps section.
type Swaps struct {
	// RequireMinOut demands a non-zero minimum output.
	RequireMinOut *bool `json:"requireMinOut,omitempty"`
	// MaxSlippageBps bounds the slippage a minimum output allows (0..10000).
	MaxSlippageBps *int `json:"maxSlippageBps,omitempty"`
	// RequirePriceLimit demands that a swap carry its own price limit (a V3
	// sqrtPriceLimitX96, a Universal Router minHopPriceX36) as well as a minimum output.
	RequirePriceLimit *bool `json:"requirePriceLimit,omitempty"`
}

// Orders is the orders section.
type Orders struct {
	// RequireLimitPrice demands a limit price on orders.
	RequireLimitPrice *bool `json:"requireLimitPrice,omitempty"`
	// MaxPriceDeviationBps bounds a limit price's distance from the mark (0..10000).
	MaxPriceDeviationBps *int `json:"maxPriceDeviationBps,omitempty"`
}

// Perps is the perps section.
type Perps struct {
	// MaxLeverage is the highest leverage allowed (> 0).
	MaxLeverage *float64 `json:"maxLeverage,omitempty"`
}

// Limits is the limits section.
type Limits struct {
	// PerTxUSD is the largest USD notional of one action (>= 0).
	PerTxUSD *float64 `json:"perTxUsd,omitempty"`
}

// Sinks is the sinks section.
type Sinks struct {
	// Extra lists addresses treated as sinks beside the built-in ones.
	Extra []string `json:"extra"`
}

// The dotted paths the checks report as triggeringPolicyField (docs/policy.md#sections).
const (
	FieldVenues           = "venues.allowed"
	FieldChains           = "chains.allowed"
	FieldContracts        = "contracts"
	FieldKnownContracts   = "knownContracts"
	FieldAssetUniverse    = "assets.universe"
	FieldHyperliquid      = "assets.hyperliquid"
	FieldRecipients       = "recipients.allowed"
	FieldSides            = "trading.sides"
	FieldRequireMinOut    = "swaps.requireMinOut"
	FieldMaxSlippage      = "swaps.maxSlippageBps"
	FieldRequireSwapLimit = "swaps.requirePriceLimit"
	FieldRequireLimit     = "orders.requireLimitPrice"
	FieldMaxDeviation     = "orders.maxPriceDeviationBps"
	FieldMaxLeverage      = "perps.maxLeverage"
	FieldPerTxUSD         = "limits.perTxUsd"
	FieldSinksExtra       = "sinks.extra"
)
