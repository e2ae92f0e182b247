// Package testenv starts the real components that x402gate's tests run against and cleans them
// up with t.Cleanup: a local EVM chain (anvil from the npm package @foundry-rs/anvil-linux-amd64) with our
// EIP-3009 token deployed, Redis and PostgreSQL. Nothing here is faked; a component that cannot
// be started fails the test with a message naming the install step, it is never skipped.
//
// The chain:
//
//	chain, token := testenv.StartChainWithToken(t) // anvil, chain id 84532, token "USDC"/"2", payers funded
//	payer := chain.Accounts[1]
//	a := token.NewAuthorization(t, payer.Address, chain.Accounts[2].Address, big.NewInt(10_000))
//	sig := token.SignAuthorization(t, payer.Key, a)
//
// Account roles, by index into Chain.Accounts (anvil's well-known development accounts, see
// DevKeys; their private keys are public and hold nothing of value anywhere else):
//   - 0 is reserved as the facilitator's signer. The harness never sends from it, so its
//     account nonce is 0 when a test starts.
//   - 1..9 are payers and payees. StartChainWithToken mints 1000 USDC (1000e6 base units) to each.
//
// Contracts are deployed and minted by a separate, freshly generated deployer account (funded
// with anvil_setBalance), so no test account's nonce moves because of the harness.
//
// Node scripts (the real npm x402 clients in integration/) run with RunNode, from the
// integration directory found through ModuleRoot.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ModuleRoot returns the directory holding the go.mod of the module, found by walking up from
// the working directory (a test's working directory is its package directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("find module root: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find module root: no go.mod above the working directory")
		}
		dir = parent
	}
}
