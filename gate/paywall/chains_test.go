package paywall

import (
	"fmt"
	"testing"
)

// TestPaywallPassWords: a pass reads as a person says it.
func TestPaywallPassWords(t *testing.T) {
	for desc, want := range map[string]string{
		"1 hour of /":              "this whole site for 1 hour",
		"24 hours of /premium/":    "every page under /premium/ for 24 hours",
		"10 minutes of /a/b/":      "every page under /a/b/ for 10 minutes",
		"2 days of /tales of old/": "every page under /tales of old/ for 2 days",
	} {
		if got := passWords(desc); got != want {
			t.Errorf("passWords(%q) = %q, want %q", desc, got, want)
		}
	}
}

// TestPaywallChainsToAdd: the page can add Base, Base Sepolia and a local anvil chain to a
// wallet, each with a public (or anvil's default) RPC endpoint, and no other chain.
func TestPaywallChainsToAdd(t *testing.T) {
	for id, want := range map[int64]string{8453: "https://mainnet.base.org", 84532: "https://sepolia.base.org", 31337: "http://127.0.0.1:8545"} {
		c := chainToAdd(id)
		if c == nil || len(c.RPCURLs) != 1 || c.RPCURLs[0] != want || c.NativeCurrency.Decimals != 18 || c.ChainName == "" {
			t.Errorf("chain %d: %+v", id, c)
			continue
		}
		if c.ChainID != fmt.Sprintf("0x%x", id) {
			t.Errorf("chain %d: chainId %q", id, c.ChainID)
		}
	}
	if c := chainToAdd(1); c != nil {
		t.Errorf("chain 1: %+v, want none", c)
	}
}
