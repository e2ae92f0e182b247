package uniswap

import (
	"encoding/hex"
	"testing"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
)

// TestOptionsContractsReplaceABuiltIn: a configured contract at a built-in address replaces
// it; a policy's does not.
func TestOptionsContractsReplaceABuiltIn(t *testing.T) {
	r := mustRegistry([]KnownContract{{84532, urV21, ContractUniversalRouter, "2.0"}})
	if k, ok := r.lookup(84532, urV21); !ok || k.ur != urV2_0 {
		t.Errorf("configured: %v %v", k, ok)
	}
	s := &actions.Scratch{Added: map[string]map[string]string{"84532": {urV21.Hex(): "uniswap.swapRouter"}}}
	if k, ok := builtinRegistry.knownAt(s, 84532, urV21); !ok || k.ur != urV2_1 {
		t.Errorf("a policy redefined a built-in router: %v %v", k, ok)
	}
	if _, ok := builtinRegistry.knownAt(s, 84532, urOther); ok {
		t.Error("an address neither built in nor added is known")
	}
}

// TestExecuteSelectors: the Universal Router's two execute selectors are the keccak-256 of
// their signatures.
func TestExecuteSelectors(t *testing.T) {
	for sig, sel := range map[string]string{"execute(bytes,bytes[],uint256)": selExecute, "execute(bytes,bytes[])": selExecuteNoDeadline} {
		if got := "0x" + hex.EncodeToString(crypto.Keccak256([]byte(sig))[:4]); got != sel {
			t.Errorf("%s: %s, want %s", sig, sel, got)
		}
	}
}
