package txsender

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"go.uber.org/zap"
)

// Outcomes of a send that did not end in a broadcast.
var (
	// ErrNotBroadcast: the transaction certainly did not reach the node (the journal
	// write failed, the connection was refused) or the node refused it definitely
	// (isDefiniteRefusal). The sender's nonce was not used.
	ErrNotBroadcast = errors.New("transaction not broadcast")
	// ErrBroadcastUnknown: the node may or may not have the transaction (a transport
	// failure during eth_sendRawTransaction, or an error reply that is not a definite
	// refusal). Only a receipt or reconcile can tell.
	ErrBroadcastUnknown = errors.New("broadcast outcome unknown")
)

// gasHeadroom is the factor applied to a gas estimate: estimate * 12 / 10.
const (
	gasHeadroomNum = 12
	gasHeadroomDen = 10
	feeCacheTTL    = 2 * time.Second
)

// Sender signs and broadcasts the facilitator's transactions on one chain. It owns the
// signer account's nonce: read once from the node's pending nonce, then counted locally,
// so concurrent settlements never race for a nonce (docs/facilitator.md#settle-order step 6).
// Sends are pipelined (docs/facilitator.md#settle-order): concurrent sends queue, and
// whoever takes the lead takes the whole queue as one batch, signs it with consecutive nonces,
// journals every row of it in one transaction (one fsync), and broadcasts it in nonce
// order in one JSON-RPC batch request. Receipts are awaited outside the lead, so no
// broadcast waits for another's receipt. After a nonce error or an uncertain broadcast the
// next batch reads the pending nonce again.
type Sender struct {
	node    *Node
	chainID *big.Int
	key     *ecdsa.PrivateKey
	addr    common.Address
	signer  types.Signer
	log     *zap.Logger

	lead   chan struct{} // holds a token while a batch runs; next, synced, floor and holes are the batch's
	next   uint64
	synced bool
	// floor is one past the highest nonce the node took: a later batch never signs below
	// it, even when the node's pending nonce is lower (a transaction queued behind a gap is
	// not counted there), so it never replaces a transaction the node took.
	floor uint64
	// holes are the transactions below floor that the node did not take or may not have
	// taken, not filled yet: the transactions after them wait until they are (fillGaps).
	holes []hole

	qmu   sync.Mutex
	queue []*sendReq // sends waiting for the next batch

	feeMu  sync.Mutex
	tip    *big.Int
	feeCap *big.Int
	feeAt  time.Time

	gasMu     sync.Mutex
	gasLimits map[gasKey]uint64 // simulate's gas limit per target and function
}

// gasKey names the gas limits simulate keeps: one per contract and function selector.
type gasKey struct {
	to       common.Address
	selector [4]byte
}

// New returns the sender of the signer key on the chain chainID, through node.
func New(node *Node, chainID *big.Int, key *ecdsa.PrivateKey, log *zap.Logger) *Sender {
	if log == nil {
		log = zap.NewNop()
	}
	return &Sender{
		node:    node,
		chainID: chainID,
		key:     key,
		addr:    crypto.PubkeyToAddress(key.PublicKey),
		signer:  types.LatestSignerForChainID(chainID),
		log:     log,
		lead:    make(chan struct{}, 1),

		gasLimits: map[gasKey]uint64{},
	}
}

// Call is one contract call to send: its target, calldata and gas limit.
type Call struct {
	To   common.Address
	Data []byte
	Gas  uint64
}

// Estimate returns the gas limit for c with headroom. A revert comes back wrapped in
// ErrCallReverted with the node's message; a transport failure as a chainError.
func (s *Sender) Estimate(ctx context.Context, to common.Address, data []byte) (Call, error) {
	gas, err := s.node.Client.EstimateGas(ctx, ethereum.CallMsg{From: s.addr, To: &to, Data: data})
	if err != nil {
		if IsRPCReply(err) {
			return Call{}, fmt.Errorf("estimate gas: %w: %s", ErrCallReverted, s.node.Redact(err))
		}
		return Call{}, s.node.Unavailable("estimate gas", err)
	}
	return Call{To: to, Data: data, Gas: gas * gasHeadroomNum / gasHeadroomDen}, nil
}

// SimulateHeadroom is the factor from a gas estimate to the limit simulate keeps for
// later calls of the same function (docs/facilitator.md#gas-limit).
const SimulateHeadroom = 2

// Simulate runs data against to as the signer would send it, and returns the call with a
// gas limit it succeeded within. The first call of a function (per target and selector)
// is estimated (eth_estimateGas, a binary search that runs it many times), and twice the
// estimate is kept as its limit; later calls run once, by eth_call with 1/1.2 of that limit
// as their gas, so a success proves the transaction succeeds on the same state with 20% of
// gas to spare, as an estimate's limit has. Any error reply of that eth_call (a revert, or running out of gas because the
// state or the contract changed) falls back to eth_estimateGas, which decides: its revert
// is the refusal (ErrCallReverted with the node's message, as from estimate), its success
// the new limit. A transport failure is a chainError (docs/facilitator.md#gas-limit).
func (s *Sender) Simulate(ctx context.Context, to common.Address, data []byte) (Call, error) {
	var key gasKey
	if len(data) >= 4 {
		key = gasKey{to: to, selector: [4]byte(data[:4])}
		s.gasMu.Lock()
		gas, ok := s.gasLimits[key]
		s.gasMu.Unlock()
		if ok {
			// run with 1/1.2 of the limit, so that the limit sent keeps the same 20% over
			// what this call needed as an estimate's limit does (estimate)
			_, err := s.node.Client.CallContract(ctx, ethereum.CallMsg{From: s.addr, To: &to, Gas: gas * gasHeadroomDen / gasHeadroomNum, Data: data}, nil)
			if err == nil {
				return Call{To: to, Data: data, Gas: gas}, nil
			}
			if !IsRPCReply(err) {
				return Call{}, s.node.Unavailable("simulate", err)
			}
		}
	}
	gas, err := s.node.Client.EstimateGas(ctx, ethereum.CallMsg{From: s.addr, To: &to, Data: data})
	if err != nil {
		if IsRPCReply(err) {
			return Call{}, fmt.Errorf("estimate gas: %w: %s", ErrCallReverted, s.node.Redact(err))
		}
		return Call{}, s.node.Unavailable("estimate gas", err)
	}
	gas *= SimulateHeadroom
	if len(data) >= 4 {
		s.gasMu.Lock()
		s.gasLimits[key] = gas
		s.gasMu.Unlock()
	}
	return Call{To: to, Data: data, Gas: gas}, nil
}

// fees returns the EIP-1559 tip and fee cap: the node's suggested tip plus twice the
// latest base fee, cached for a moment.
func (s *Sender) fees(ctx context.Context) (*big.Int, *big.Int, error) {
	s.feeMu.Lock()
	defer s.feeMu.Unlock()
	if s.tip != nil && time.Since(s.feeAt) < feeCacheTTL {
		return s.tip, s.feeCap, nil
	}
	tip, err := s.node.Client.SuggestGasTipCap(ctx)
	if err != nil {
		return nil, nil, s.node.Unavailable("suggest gas tip", err)
	}
	head, err := s.node.Client.HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, nil, s.node.Unavailable("latest header", err)
	}
	base := head.BaseFee
	if base == nil {
		base = new(big.Int)
	}
	feeCap := new(big.Int).Add(tip, new(big.Int).Mul(base, big.NewInt(2)))
	s.tip, s.feeCap, s.feeAt = tip, feeCap, time.Now()
	return tip, feeCap, nil
}

// Queued is the number of sends waiting for the next batch.
func (s *Sender) Queued() int {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return len(s.queue)
}

// Hold keeps the next batch from starting until release is called: sends queue meanwhile,
// and the batch that starts next takes them all, in the order they came.
func (s *Sender) Hold() (release func()) {
	s.lead <- struct{}{}
	return func() { <-s.lead }
}

// GasLimit is the gas limit Simulate keeps for the function of selector on to, and
// whether it keeps one (docs/facilitator.md#gas-limit).
func (s *Sender) GasLimit(to common.Address, selector [4]byte) (uint64, bool) {
	s.gasMu.Lock()
	defer s.gasMu.Unlock()
	g, ok := s.gasLimits[gasKey{to: to, selector: selector}]
	return g, ok
}

// KeepGasLimit makes Simulate keep gas as the limit of the function of selector on to, as
// if it had estimated it: a limit that turns out too small falls back to an estimate.
func (s *Sender) KeepGasLimit(to common.Address, selector [4]byte, gas uint64) {
	s.gasMu.Lock()
	defer s.gasMu.Unlock()
	s.gasLimits[gasKey{to: to, selector: selector}] = gas
}
