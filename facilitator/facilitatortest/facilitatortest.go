// Package facilitatortest starts the real parts a test of a facilitator's user needs: an anvil
// chain with our EIP-3009 token, a registry that knows it as base-sepolia, and an
// in-process facilitator.Service on it with a memory approval store and an SQLite journal,
// as the bundled facilitator runs. The gate's and the facilitator API's tests share it;
// the facilitator's own tests cannot (they would import themselves).
package facilitatortest

import (
	"context"
	"math/big"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// Env is one anvil chain with our token, known to Registry as base-sepolia.
type Env struct {
	*testenv.Chain
	Token    *testenv.Token
	Network  x402.Network
	Registry *x402.Registry
}

// StartChain starts anvil with our token; both stop when t ends.
func StartChain(t testing.TB) *Env {
	t.Helper()
	chain, token := testenv.StartChainWithToken(t)
	net := x402.Network{
		Name: x402.BaseSepolia.Name, CAIP2: x402.BaseSepolia.CAIP2, ChainID: new(big.Int).Set(chain.ChainID),
		USDC: x402.Asset{Address: token.Address, Name: token.Name, Version: token.Version, Decimals: 6, Symbol: "USDC"},
	}
	reg := x402.NewRegistry()
	if err := reg.Add(net); err != nil {
		t.Fatalf("registry: %v", err)
	}
	return &Env{Chain: chain, Token: token, Network: net, Registry: reg}
}

// Service starts a facilitator.Service on c, with the chain's facilitator account as
// signer, a MemoryStore and an SQLite journal; mutate, when not nil, changes its config
// first. Everything is closed when t ends.
func (c *Env) Service(t testing.TB, mutate func(*facilitator.Config)) *facilitator.Service {
	t.Helper()
	j, err := journal.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatalf("open journal: %v", err)
	}
	t.Cleanup(func() { _ = j.Close() })
	store := approval.NewMemoryStore(0)
	t.Cleanup(func() { _ = store.Close() })
	cfg := facilitator.Config{
		Networks: []facilitator.NetworkConfig{facilitator.NetworkOf(c.Network, c.RPCURL)},
		Signer:   c.FacilitatorAccount().Key,
		Store:    store,
		Journal:  j,
		Logger:   zap.NewNop(),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := facilitator.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("facilitator.New: %v", err)
	}
	t.Cleanup(e.Close)
	return e
}
