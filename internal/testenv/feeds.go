package testenv

import (
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/integration/contracts"
)

// PriceFeed is a deployed TestPriceFeed (integration/contracts): a Chainlink-style aggregator
// whose rounds the harness's deployer sets.
type PriceFeed struct {
	// Chain is the chain the feed lives on.
	Chain *Chain
	// Address is the aggregator contract.
	Address common.Address
	// Decimals is the decimals of its answers.
	Decimals uint8
}

// DeployPriceFeed deploys a TestPriceFeed with decimals and description (e.g. 8, "ETH / USD").
// It has no round until SetRound.
func (c *Chain) DeployPriceFeed(t testing.TB, decimals uint8, description string) *PriceFeed {
	t.Helper()
	args, err := contracts.PriceFeedABI.Pack("", decimals, description)
	if err != nil {
		t.Fatalf("testenv: pack price feed constructor: %v", err)
	}
	addr := c.Deploy(t, append(append([]byte{}, contracts.PriceFeed.Bytecode...), args...))
	return &PriceFeed{Chain: c, Address: addr, Decimals: decimals}
}

// SetRound starts a new round with answer (in the feed's decimals) updated at updatedAt.
func (f *PriceFeed) SetRound(t testing.TB, answer *big.Int, updatedAt time.Time) {
	t.Helper()
	data := packOrFatal(t, contracts.PriceFeedABI, "setRound", answer, big.NewInt(updatedAt.Unix()))
	f.Chain.Transact(t, f.Chain.deployer, f.Address, data)
}

// SanctionsOracle is a deployed TestSanctionsOracle (integration/contracts): the
// isSanctioned(address) read side of Chainalysis's oracle over a list the deployer edits.
type SanctionsOracle struct {
	// Chain is the chain the oracle lives on.
	Chain *Chain
	// Address is the oracle contract.
	Address common.Address
}

// DeploySanctionsOracle deploys an empty TestSanctionsOracle.
func (c *Chain) DeploySanctionsOracle(t testing.TB) *SanctionsOracle {
	t.Helper()
	addr := c.Deploy(t, append([]byte{}, contracts.SanctionsOracle.Bytecode...))
	return &SanctionsOracle{Chain: c, Address: addr}
}

// Add puts addrs on the oracle's list.
func (o *SanctionsOracle) Add(t testing.TB, addrs ...common.Address) {
	t.Helper()
	o.Chain.Transact(t, o.Chain.deployer, o.Address, packOrFatal(t, contracts.SanctionsOracleABI, "addToSanctionsList", addrs))
}

// Remove takes addrs off the oracle's list.
func (o *SanctionsOracle) Remove(t testing.TB, addrs ...common.Address) {
	t.Helper()
	o.Chain.Transact(t, o.Chain.deployer, o.Address, packOrFatal(t, contracts.SanctionsOracleABI, "removeFromSanctionsList", addrs))
}

// IsSanctioned asks the oracle about addr.
func (o *SanctionsOracle) IsSanctioned(t testing.TB, addr common.Address) bool {
	t.Helper()
	var out bool
	callView(t, o.Chain, contracts.SanctionsOracleABI, o.Address, &out, "isSanctioned", addr)
	return out
}

// HungRPC starts an endpoint that accepts connections and never answers, a node that hangs,
// and returns its URL. Cleanup closes the listener and every connection.
func HungRPC(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: hung rpc: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	return "http://" + ln.Addr().String()
}
