package paywall

import (
	"strconv"
	"strings"
)

// addChain is the parameter of EIP-3085 wallet_addEthereumChain: what a wallet needs to
// know a chain it has not seen.
type addChain struct {
	ChainID           string         `json:"chainId"`
	ChainName         string         `json:"chainName"`
	NativeCurrency    nativeCurrency `json:"nativeCurrency"`
	RPCURLs           []string       `json:"rpcUrls"`
	BlockExplorerURLs []string       `json:"blockExplorerUrls,omitempty"`
}

// nativeCurrency is the gas currency of an addChain.
type nativeCurrency struct {
	Name     string `json:"name"`
	Symbol   string `json:"symbol"`
	Decimals int    `json:"decimals"`
}

// knownChains are the chains the paywall can add to a wallet, by chain id: Base and Base
// Sepolia with their public RPC endpoints, and a local anvil chain (31337) at anvil's
// default address. A route's gate never hands its own RPC URL to a browser (it may carry a
// credential), so on any other chain the page asks the person to add the chain themselves
// (docs/gate.md#paywall).
var knownChains = map[int64]addChain{
	8453: {ChainName: "Base", RPCURLs: []string{"https://mainnet.base.org"}, BlockExplorerURLs: []string{"https://basescan.org"}},
	84532: {ChainName: "Base Sepolia", RPCURLs: []string{"https://sepolia.base.org"},
		BlockExplorerURLs: []string{"https://sepolia.basescan.org"}},
	31337: {ChainName: "Anvil (local)", RPCURLs: []string{"http://127.0.0.1:8545"}},
}

// chainToAdd is the wallet_addEthereumChain parameter of chain id n, or nil when the
// page knows no RPC endpoint for it.
func chainToAdd(n int64) *addChain {
	c, ok := knownChains[n]
	if !ok {
		return nil
	}
	c.ChainID = "0x" + strconv.FormatInt(n, 16)
	c.NativeCurrency = nativeCurrency{Name: "Ether", Symbol: "ETH", Decimals: 18}
	return &c
}

// passWords says what a pass buys in plain words: "this whole site for 1 hour" for the
// scope /, "every page under /premium/ for 24 hours" otherwise. desc is the gate's
// description, "24 hours of /premium/"; a duration never holds " of ".
func passWords(desc string) string {
	d, scope, ok := strings.Cut(desc, " of ")
	switch {
	case !ok:
		return desc
	case scope == "/":
		return "this whole site for " + d
	}
	return "every page under " + scope + " for " + d
}
