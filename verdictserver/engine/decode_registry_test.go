package engine

import (
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
)

// TestOptionsContractsRefused: a contract the config adds must name a kind the decoders read,
// a Universal Router its version, a chain and an address (docs/policy.md#known-contracts).
func TestOptionsContractsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    KnownContract
		want string
	}{
		{"an unknown kind", KnownContract{84532, urOther, "uniswap.router", ""}, `kind "uniswap.router"`},
		{"a Universal Router without its version", KnownContract{84532, urOther, ContractUniversalRouter, ""}, "version"},
		{"a Universal Router of an unknown version", KnownContract{84532, urOther, ContractUniversalRouter, "3.0"}, `"3.0"`},
		{"a version on a SwapRouter02", KnownContract{84532, urOther, ContractSwapRouter02, "2.0"}, "only a Universal Router"},
		{"chain 0", KnownContract{0, urOther, ContractSwapRouter02, ""}, "chain id"},
		{"the zero address", KnownContract{84532, common.Address{}, ContractPermit2, ""}, "address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Options{Contracts: []KnownContract{tc.c}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

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
