package evmcall

import (
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
)

// chainAssets are the quote assets and the wrapped native token of the chains the EVM
// decoders know (docs/policy.md#evm-actions).
type chainAssets struct {
	wrapped common.Address
	quotes  []common.Address
}

var knownChains = map[int64]chainAssets{
	1: {common.HexToAddress("0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2"), []common.Address{
		common.HexToAddress("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"), // USDC
		common.HexToAddress("0xdAC17F958D2ee523a2206206994597C13D831ec7"), // USDT
		common.HexToAddress("0x6B175474E89094C44Da98b954EedeAC495271d0F"), // DAI
	}},
	8453: {common.HexToAddress("0x4200000000000000000000000000000000000006"), []common.Address{
		common.HexToAddress("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"), // USDC
		common.HexToAddress("0xd9aAEc86B65D86f6A7B5B1b0c42FFA531710b6CA"), // USDbC
		common.HexToAddress("0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb"), // DAI
	}},
	84532: {common.HexToAddress("0x4200000000000000000000000000000000000006"), []common.Address{
		common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e"), // USDC
	}},
	11155111: {common.HexToAddress("0xfFf9976782d46CC05630D1f6eBAb18b2324d6B14"), []common.Address{
		common.HexToAddress("0x1c7D4B196Cb0C7B01d743Fbc6116a902379C7238"), // USDC
	}},
}

// WrappedNative is the chain's WETH, when known.
func WrappedNative(chainID int64) (common.Address, bool) {
	c, ok := knownChains[chainID]
	return c.wrapped, ok
}

// quoteRank is 2 for a dollar stablecoin, 1 for the native coin and WETH, 0 for any other
// token.
func quoteRank(chainID int64, a common.Address) int {
	if a == actions.NativeAsset {
		return 1
	}
	c, ok := knownChains[chainID]
	if !ok {
		return 0
	}
	if a == c.wrapped {
		return 1
	}
	for _, q := range c.quotes {
		if q == a {
			return 2
		}
	}
	return 0
}

// SwapSide is buy when a swap spends a higher-ranked quote asset (dollars over ETH over any
// other token), sell when it receives one, "" (both) when both rank the same
// (docs/policy.md#trades).
func SwapSide(chainID int64, in, out common.Address) string {
	ri, ro := quoteRank(chainID, in), quoteRank(chainID, out)
	switch {
	case ri > ro:
		return actions.SideBuy
	case ri < ro:
		return actions.SideSell
	}
	return ""
}
