package testenv

import (
	"context"
	"io"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/contracts"
)

// PriceFeed is a deployed TestPriceFeed (internal/contracts): a Chainlink-style aggregator
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

// SanctionsOracle is a deployed TestSanctionsOracle (internal/contracts): the
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

// Clock is a test clock that moves only when told; its Now is safe for concurrent use. Give
// Clock.Now to whatever takes a clock function.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// CountingCaller passes eth_calls to Caller and counts them, so a test sees how many reads
// reached the chain.
type CountingCaller struct {
	// Caller runs the calls; *ethclient.Client is one.
	Caller ethereum.ContractCaller
	n      atomic.Int64
}

// CallContract counts the call and passes it on.
func (c *CountingCaller) CallContract(ctx context.Context, msg ethereum.CallMsg, block *big.Int) ([]byte, error) {
	c.n.Add(1)
	return c.Caller.CallContract(ctx, msg, block)
}

// Calls is how many eth_calls were made.
func (c *CountingCaller) Calls() int64 { return c.n.Load() }
