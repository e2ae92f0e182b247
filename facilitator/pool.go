package facilitator

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"math/big"
	"slices"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/txsender"
)

// ErrRelayerInsufficientFunds: every signer lane that could send a settlement is out of
// the pool because its gas balance is under Config.MinGasBalance. Nothing was claimed or
// sent; the payer is not charged (docs/facilitator.md#signer-pool).
var ErrRelayerInsufficientFunds = errors.New("relayer_insufficient_funds: every signer key's gas balance is below min_gas_balance")

// lane is one signer key of a chain's pool: its own sender (nonce, fee cache, batches),
// the settlements it has in flight and whether its gas balance keeps it in the pool.
type lane struct {
	addr    common.Address
	sender  txSender
	pending int      // settlements acquired and not released; guarded by pool.mu
	balance *big.Int // last known gas balance (read, less what receipts spent); nil: not read
	out     bool     // out of the pool for a low gas balance
}

// pool spreads a chain's settlements over its signer lanes (docs/facilitator.md#signer-pool):
// a settle takes the lane with the fewest settlements in flight, among those in the pool
// with fewer than max in flight, and waits for one when none is free.
type pool struct {
	lanes []*lane // lanes[0] is the primary signer (Config.SignerKey)
	max   int
	min   *big.Int // MinGasBalance
	// onFunds, when set, is told each time a lane leaves the pool (false) or comes back.
	onFunds func(addr common.Address, funded bool)

	mu sync.Mutex
	// waiting are the settles waiting for a slot, in the order they came: a freed slot goes
	// to the first one that may take it, so no settle waits behind later ones.
	waiting []*laneWaiter
	next    int // where the next tie-break starts, so that equal lanes take turns
}

// laneWaiter is one settle waiting in acquire; got receives its lane or its error once.
type laneWaiter struct {
	only *lane
	got  chan laneGrant // buffered: dispatch never blocks on it
}

// laneGrant is what a waiting settle is given: a lane whose slot is taken for it, or the
// error that every lane it may take is out of the pool.
type laneGrant struct {
	ln  *lane
	err error
}

// newPool makes the lanes of keys on one chain, each with a sender of its own.
func newPool(node *txsender.Node, chainID *big.Int, keys []*ecdsa.PrivateKey, max int, min *big.Int, log *zap.Logger) *pool {
	p := &pool{max: max, min: min}
	for _, k := range keys {
		p.lanes = append(p.lanes, &lane{addr: crypto.PubkeyToAddress(k.PublicKey), sender: txsender.New(node, chainID, k, log)})
	}
	return p
}

// primary is the lane of Config.SignerKey.
func (p *pool) primary() *lane { return p.lanes[0] }

// laneOf returns the lane of signer addr, if it is one of the pool's.
func (p *pool) laneOf(addr common.Address) (*lane, bool) {
	for _, ln := range p.lanes {
		if ln.addr == addr {
			return ln, true
		}
	}
	return nil, false
}

// acquire takes a slot of a lane for one settlement: of only when set (an upto settle must
// come from the address its witness names), else the lane in the pool with the fewest in
// flight. While every such lane is full it waits, first come first served, until a slot
// frees or ctx ends. It fails with ErrRelayerInsufficientFunds at once, or while it
// waits, when every such lane is out of the pool.
func (p *pool) acquire(ctx context.Context, only *lane) (*lane, error) {
	p.mu.Lock()
	// Every settle waiting now may take none of the free lanes (dispatch has handed them
	// out), so a free lane taken here is not taken from one of them.
	ln, funded := p.pick(only)
	switch {
	case ln != nil:
		ln.pending++
		p.mu.Unlock()
		return ln, nil
	case !funded:
		p.mu.Unlock()
		return nil, ErrRelayerInsufficientFunds
	}
	w := &laneWaiter{only: only, got: make(chan laneGrant, 1)}
	p.waiting = append(p.waiting, w)
	p.mu.Unlock()
	select {
	case g := <-w.got:
		return g.ln, g.err
	case <-ctx.Done():
	}
	p.mu.Lock()
	if i := slices.Index(p.waiting, w); i >= 0 {
		p.waiting = slices.Delete(p.waiting, i, i+1)
		p.mu.Unlock()
		return nil, ctx.Err()
	}
	p.mu.Unlock()
	// Granted as ctx ended: give the slot back to the next in line.
	if g := <-w.got; g.ln != nil {
		p.release(g.ln, nil)
	}
	return nil, ctx.Err()
}

// dispatch hands freed slots to the waiting settles in the order they came, and fails
// those whose every lane is out of the pool. The caller holds p.mu.
func (p *pool) dispatch() {
	kept := p.waiting[:0]
	for _, w := range p.waiting {
		ln, funded := p.pick(w.only)
		switch {
		case ln != nil:
			ln.pending++
			w.got <- laneGrant{ln: ln}
		case !funded:
			w.got <- laneGrant{err: ErrRelayerInsufficientFunds}
		default:
			kept = append(kept, w)
		}
	}
	clear(p.waiting[len(kept):])
	p.waiting = kept
}

// pick returns the free lane with the fewest settlements in flight (nil when all are
// full), and whether any candidate lane is in the pool at all. Ties go round the pool.
// The caller holds p.mu.
func (p *pool) pick(only *lane) (best *lane, funded bool) {
	n, at := len(p.lanes), 0
	for i := range n {
		ln := p.lanes[(p.next+i)%n]
		if (only != nil && ln != only) || ln.out {
			continue
		}
		funded = true
		if ln.pending < p.max && (best == nil || ln.pending < best.pending) {
			best, at = ln, (p.next+i)%n
		}
	}
	if best != nil {
		p.next = (at + 1) % n // the next tie goes to the lane after this one
	}
	return best, funded
}

// release gives back ln's slot; spent is what the settlement's receipt cost in gas (nil:
// unknown), taken off the lane's known balance so a lane leaves the pool as soon as it
// runs low, before the next balance check.
func (p *pool) release(ln *lane, spent *big.Int) {
	p.mu.Lock()
	ln.pending--
	if spent != nil && ln.balance != nil {
		ln.balance = new(big.Int).Sub(ln.balance, spent)
		p.judge(ln)
	}
	p.dispatch()
	p.mu.Unlock()
}

// setBalance records a balance read of ln and takes it out of the pool or back in.
func (p *pool) setBalance(ln *lane, bal *big.Int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ln.balance = bal
	p.judge(ln)
	p.dispatch()
}

// judge takes ln out of the pool when its known balance is under min, and back in when
// it is not. The caller holds p.mu.
func (p *pool) judge(ln *lane) {
	out := ln.balance.Cmp(p.min) < 0
	if out == ln.out {
		return
	}
	ln.out = out
	if p.onFunds != nil {
		p.onFunds(ln.addr, !out)
	}
}

// LaneInfo is one signer lane of a network's pool, as Service.Lanes reports it.
type LaneInfo struct {
	Network string `json:"network"`
	Address string `json:"address"`
	// Pending is the settlements the lane has in flight.
	Pending int `json:"pending"`
	// InPool is false while the lane's gas balance is under Config.MinGasBalance.
	InPool bool `json:"inPool"`
	// Balance is the lane's last known gas balance in wei; empty when never read.
	Balance string `json:"balance,omitempty"`
}

// Lanes lists every signer lane of every network, in configuration order.
func (e *Service) Lanes() []LaneInfo {
	var out []LaneInfo
	for _, c := range e.order {
		c.pool.mu.Lock()
		for _, ln := range c.pool.lanes {
			li := LaneInfo{Network: c.net.CAIP2, Address: ln.addr.Hex(), Pending: ln.pending, InPool: !ln.out}
			if ln.balance != nil {
				li.Balance = ln.balance.String()
			}
			out = append(out, li)
		}
		c.pool.mu.Unlock()
	}
	return out
}

// CheckBalances reads the gas balance of every lane of every ready network once, and
// takes each lane out of the pool or back in (docs/facilitator.md#signer-pool). A balance
// that cannot be read leaves its lane as it was.
func (e *Service) CheckBalances(ctx context.Context) {
	for _, c := range e.order {
		if c.state.get() == NetworkReady {
			e.checkBalances(ctx, c)
		}
	}
}

// checkBalances is CheckBalances of one chain.
func (e *Service) checkBalances(ctx context.Context, c *chain) {
	for _, ln := range c.pool.lanes {
		bal, err := c.Client.BalanceAt(ctx, ln.addr, nil)
		if err != nil {
			e.logChainErr("signer pool: read gas balance", c, c.Unavailable("balance", err))
			continue
		}
		c.pool.setBalance(ln, bal)
	}
}

// watchBalances runs CheckBalances every Config.BalanceCheckInterval until ctx ends.
func (e *Service) watchBalances(ctx context.Context) {
	t := time.NewTicker(time.Duration(e.cfg.BalanceCheckInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.CheckBalances(ctx)
		}
	}
}

// receiptCost is the gas a receipt's transaction paid, in wei (nil when the receipt
// does not say).
func receiptCost(r *types.Receipt) *big.Int {
	if r == nil || r.EffectiveGasPrice == nil {
		return nil
	}
	return new(big.Int).Mul(new(big.Int).SetUint64(r.GasUsed), r.EffectiveGasPrice)
}
