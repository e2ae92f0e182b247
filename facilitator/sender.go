package facilitator

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/journal"
)

// Outcomes of a send that did not end in a broadcast.
var (
	// errNotBroadcast: the transaction certainly did not reach the node (the journal
	// write failed, the connection was refused) or the node refused it definitely
	// (isDefiniteRefusal). The sender's nonce was not used.
	errNotBroadcast = errors.New("transaction not broadcast")
	// errBroadcastUnknown: the node may or may not have the transaction (a transport
	// failure during eth_sendRawTransaction, or an error reply that is not a definite
	// refusal). Only a receipt or reconcile can tell.
	errBroadcastUnknown = errors.New("broadcast outcome unknown")
)

// gasHeadroom is the factor applied to a gas estimate: estimate * 12 / 10.
const (
	gasHeadroomNum = 12
	gasHeadroomDen = 10
	feeCacheTTL    = 2 * time.Second
)

// sender signs and broadcasts the facilitator's transactions on one chain. It owns the
// signer account's nonce: read once from the node's pending nonce, then counted locally,
// so concurrent settlements never race for a nonce (docs/facilitator.md#settle-order step 6).
// Sends are pipelined (docs/facilitator.md#settle-order): concurrent sends queue, and
// whoever takes the lead takes the whole queue as one batch, signs it with consecutive nonces,
// journals every row of it in one transaction (one fsync), and broadcasts it in nonce
// order in one JSON-RPC batch request. Receipts are awaited outside the lead, so no
// broadcast waits for another's receipt. After a nonce error or an uncertain broadcast the
// next batch reads the pending nonce again.
type sender struct {
	c      *chain
	key    *ecdsa.PrivateKey
	addr   common.Address
	signer types.Signer
	log    *zap.Logger

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

func newSender(c *chain, key *ecdsa.PrivateKey, log *zap.Logger) *sender {
	return &sender{
		c:      c,
		key:    key,
		addr:   crypto.PubkeyToAddress(key.PublicKey),
		signer: types.LatestSignerForChainID(c.net.ChainID),
		log:    log,
		lead:   make(chan struct{}, 1),

		gasLimits: map[gasKey]uint64{},
	}
}

// call is one contract call to send: its target, calldata and gas limit.
type call struct {
	to   common.Address
	data []byte
	gas  uint64
}

// estimate returns the gas limit for c with headroom. A revert comes back wrapped in
// errCallReverted with the node's message; a transport failure as a chainError.
func (s *sender) estimate(ctx context.Context, to common.Address, data []byte) (call, error) {
	gas, err := s.c.client.EstimateGas(ctx, ethereum.CallMsg{From: s.addr, To: &to, Data: data})
	if err != nil {
		if isRPCReply(err) {
			return call{}, fmt.Errorf("estimate gas: %w: %s", errCallReverted, s.c.redact(err))
		}
		return call{}, s.c.unavailable("estimate gas", err)
	}
	return call{to: to, data: data, gas: gas * gasHeadroomNum / gasHeadroomDen}, nil
}

// simulateHeadroom is the factor from a gas estimate to the limit simulate keeps for
// later calls of the same function (docs/facilitator.md#gas-limit).
const simulateHeadroom = 2

// simulate runs data against to as the signer would send it, and returns the call with a
// gas limit it succeeded within. The first call of a function (per target and selector)
// is estimated (eth_estimateGas, a binary search that runs it many times), and twice the
// estimate is kept as its limit; later calls run once, by eth_call with 1/1.2 of that limit
// as their gas, so a success proves the transaction succeeds on the same state with 20% of
// gas to spare, as an estimate's limit has. Any error reply of that eth_call (a revert, or running out of gas because the
// state or the contract changed) falls back to eth_estimateGas, which decides: its revert
// is the refusal (errCallReverted with the node's message, as from estimate), its success
// the new limit. A transport failure is a chainError (docs/facilitator.md#gas-limit).
func (s *sender) simulate(ctx context.Context, to common.Address, data []byte) (call, error) {
	var key gasKey
	if len(data) >= 4 {
		key = gasKey{to: to, selector: [4]byte(data[:4])}
		s.gasMu.Lock()
		gas, ok := s.gasLimits[key]
		s.gasMu.Unlock()
		if ok {
			// run with 1/1.2 of the limit, so that the limit sent keeps the same 20% over
			// what this call needed as an estimate's limit does (estimate)
			_, err := s.c.client.CallContract(ctx, ethereum.CallMsg{From: s.addr, To: &to, Gas: gas * gasHeadroomDen / gasHeadroomNum, Data: data}, nil)
			if err == nil {
				return call{to: to, data: data, gas: gas}, nil
			}
			if !isRPCReply(err) {
				return call{}, s.c.unavailable("simulate", err)
			}
		}
	}
	gas, err := s.c.client.EstimateGas(ctx, ethereum.CallMsg{From: s.addr, To: &to, Data: data})
	if err != nil {
		if isRPCReply(err) {
			return call{}, fmt.Errorf("estimate gas: %w: %s", errCallReverted, s.c.redact(err))
		}
		return call{}, s.c.unavailable("estimate gas", err)
	}
	gas *= simulateHeadroom
	if len(data) >= 4 {
		s.gasMu.Lock()
		s.gasLimits[key] = gas
		s.gasMu.Unlock()
	}
	return call{to: to, data: data, gas: gas}, nil
}

// fees returns the EIP-1559 tip and fee cap: the node's suggested tip plus twice the
// latest base fee, cached for a moment.
func (s *sender) fees(ctx context.Context) (*big.Int, *big.Int, error) {
	s.feeMu.Lock()
	defer s.feeMu.Unlock()
	if s.tip != nil && time.Since(s.feeAt) < feeCacheTTL {
		return s.tip, s.feeCap, nil
	}
	tip, err := s.c.client.SuggestGasTipCap(ctx)
	if err != nil {
		return nil, nil, s.c.unavailable("suggest gas tip", err)
	}
	head, err := s.c.client.HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, nil, s.c.unavailable("latest header", err)
	}
	base := head.BaseFee
	if base == nil {
		base = new(big.Int)
	}
	feeCap := new(big.Int).Add(tip, new(big.Int).Mul(base, big.NewInt(2)))
	s.tip, s.feeCap, s.feeAt = tip, feeCap, time.Now()
	return tip, feeCap, nil
}

// journaled is how send journals a transaction before broadcasting it. Every journaled
// send of one sender names the same journal, its engine's.
type journaled struct {
	j journal.Journal
	// row is the journal row of the signed transaction.
	row func(*types.Transaction) (journal.Settlement, error)
	// after, if set, runs once the row is durable and before the broadcast; an error stops
	// the broadcast (the crash test seam).
	after func(journal.Settlement) error
}

// sendReq is one send waiting in, or handled by, a batch.
type sendReq struct {
	ctx  context.Context
	cl   call
	jn   *journaled
	tx   *types.Transaction
	row  journal.Settlement
	err  error
	done chan struct{}
}

// send signs cl with the next nonce, journals the signed transaction through jn (nil: not
// journaled; when set, the row must be durable before anything is broadcast), and
// broadcasts it. The error wraps errNotBroadcast (journaling failed, or the node refused
// the transaction, or an earlier transaction of its batch was not broadcast: the nonce is
// not used) or errBroadcastUnknown (the transaction may be in the node's pool). A journal
// refusal keeps its error (journal.ErrDuplicateSettlement), with no transaction.
func (s *sender) send(ctx context.Context, cl call, jn *journaled) (*types.Transaction, error) {
	r := &sendReq{ctx: ctx, cl: cl, jn: jn, done: make(chan struct{})}
	s.qmu.Lock()
	s.queue = append(s.queue, r)
	s.qmu.Unlock()
	// Wait for a batch to answer r, or lead the next batch. A send that an earlier batch
	// answered returns without taking the lead, so the senders of a batch do not queue for
	// it one by one to learn they are done.
	select {
	case <-r.done:
	case s.lead <- struct{}{}:
		s.qmu.Lock()
		batch := s.queue
		s.queue = nil
		s.qmu.Unlock()
		// A batch answers every send it takes before it lets go of the lead, so r is in
		// this one unless an earlier batch answered it.
		if len(batch) > 0 {
			s.runBatch(ctx, batch)
		}
		<-s.lead
		<-r.done
	}
	return r.tx, r.err
}

// runBatch signs, journals and broadcasts batch, holding the lead, and answers each send.
func (s *sender) runBatch(ctx context.Context, batch []*sendReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	failAll := func(rs []*sendReq, err error) {
		for _, r := range rs {
			r.tx, r.err = nil, err
		}
	}
	tip, feeCap, err := s.fees(ctx)
	if err != nil {
		failAll(batch, fmt.Errorf("%w: %w", errNotBroadcast, err))
		return
	}
	if len(s.holes) > 0 && !s.fillGaps() {
		// the transactions after a hole would wait behind it: send nothing more until it is
		// filled (nothing is journaled or sent; the payers are not charged)
		failAll(batch, fmt.Errorf("%w: %w: a nonce gap before a taken transaction is not filled yet", errNotBroadcast, errRPCUnavailable))
		return
	}
	if !s.synced {
		n, err := s.c.client.PendingNonceAt(ctx, s.addr)
		if err != nil {
			failAll(batch, fmt.Errorf("%w: %w", errNotBroadcast, s.c.unavailable("pending nonce", err)))
			return
		}
		s.next, s.synced = max(n, s.floor), true
	}
	// Sign with consecutive nonces and journal every row in one transaction. A send the
	// journal refuses (its authorization is journaled already) drops out, and the rest are
	// signed again, so the nonces stay consecutive.
	pending := batch
	for len(pending) > 0 {
		var (
			rows  []journal.Settlement
			owner []*sendReq
			drop  = map[*sendReq]bool{}
			j     journal.Journal
		)
		for i, r := range pending {
			to := r.cl.to
			r.tx, err = types.SignNewTx(s.key, s.signer, &types.DynamicFeeTx{
				ChainID: s.c.net.ChainID, Nonce: s.next + uint64(i), GasTipCap: tip, GasFeeCap: feeCap,
				Gas: r.cl.gas, To: &to, Value: new(big.Int), Data: r.cl.data,
			})
			if err != nil {
				r.tx, r.err, drop[r] = nil, fmt.Errorf("%w: sign: %w", errNotBroadcast, err), true
				continue
			}
			if r.jn == nil {
				continue
			}
			if r.row, err = r.jn.row(r.tx); err != nil {
				r.tx, r.err, drop[r] = nil, fmt.Errorf("%w: journal prepare: %w", errNotBroadcast, err), true
				continue
			}
			rows, owner, j = append(rows, r.row), append(owner, r), r.jn.j
		}
		if len(drop) == 0 && len(rows) > 0 {
			err = j.PrepareAll(ctx, rows)
			var dup *journal.DuplicatesError
			switch {
			case errors.As(err, &dup):
				for _, i := range dup.Index {
					r := owner[i]
					r.tx, r.err, drop[r] = nil, fmt.Errorf("%w: journal prepare %s: %w", errNotBroadcast,
						r.row.AuthorizationKey, journal.ErrDuplicateSettlement), true
				}
			case err != nil:
				failAll(pending, fmt.Errorf("%w: journal prepare: %w", errNotBroadcast, err))
				return
			}
		}
		if len(drop) == 0 {
			break
		}
		kept := pending[:0:0]
		for _, r := range pending {
			if !drop[r] {
				kept = append(kept, r)
			}
		}
		pending = kept
	}
	s.broadcast(pending)
}

// maxSendBatch bounds the transactions broadcast in one JSON-RPC batch request (node
// providers limit batch sizes); a larger batch goes out in chunks of this size.
const maxSendBatch = 100

// broadcast sends the signed, journaled transactions of pending, in nonce order, and moves
// the nonce past those the node took. They go out together, as one JSON-RPC batch request
// (in chunks of maxSendBatch), so a batch costs the node one request, not one round trip
// per transaction (docs/facilitator.md#settle-order). A transaction whose journal hook
// fails is not sent, nor any after it. Each transaction's own reply decides it, as for a
// single send: taken (or already known), refused for certain (errNotBroadcast), or
// outcome unknown (errBroadcastUnknown). After a chunk with any transaction not taken, the
// later chunks are not sent: their rows are closed as failed (not_broadcast), and the
// next batch signs from the first unused nonce. A refused transaction that leaves a gap
// before ones the node took has its nonce taken by a filler (fillGaps), so they are mined.
func (s *sender) broadcast(pending []*sendReq) {
	for i, r := range pending {
		if r.jn != nil && r.jn.after != nil {
			if err := r.jn.after(r.row); err != nil {
				r.tx, r.err = nil, fmt.Errorf("%w: before broadcast: %w", errNotBroadcast, err)
				s.abandon(pending[i+1:])
				pending = pending[:i]
				break
			}
		}
	}
	for len(pending) > 0 {
		chunk := pending[:min(len(pending), maxSendBatch)]
		pending = pending[len(chunk):]
		if !s.broadcastChunk(chunk) {
			s.abandon(pending)
			return
		}
	}
}

// broadcastChunk sends chunk in one request and answers each of its sends. It reports
// whether the node took every transaction of it.
func (s *sender) broadcastChunk(chunk []*sendReq) bool {
	errs := s.sendAll(chunk)
	gap := false       // a transaction before this one was not taken
	var missing []hole // not taken, in nonce order
	for i, r := range chunk {
		err := errs[i]
		if err == nil || isAlreadyKnown(err) {
			if !gap {
				s.next = r.tx.Nonce() + 1
			}
			s.floor = max(s.floor, r.tx.Nonce()+1)
			continue
		}
		gap = true
		switch {
		case isRPCReply(err) && isDefiniteRefusal(err):
			if isNonceError(err) {
				s.synced = false
			}
			r.err = fmt.Errorf("%w: node refused the transaction: %s", errNotBroadcast, s.c.redact(err))
			missing = append(missing, hole{tx: r.tx, refused: true})
		case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, errRequestNotSent):
			r.err = fmt.Errorf("%w: %w", errNotBroadcast, s.c.unavailable("send transaction", err))
			missing = append(missing, hole{tx: r.tx, refused: true})
		default:
			s.synced = false
			r.err = fmt.Errorf("%w: %w", errBroadcastUnknown, s.c.unavailable("send transaction", err))
			missing = append(missing, hole{tx: r.tx})
		}
	}
	if !gap {
		return true
	}
	for _, h := range missing {
		if h.tx.Nonce() < s.floor {
			// a transaction after it was taken: it waits behind this nonce until it is used
			s.holes = append(s.holes, h)
		}
	}
	s.fillGaps()
	return false
}

// hole is a nonce below the sender's floor that the node did not take (refused: for
// certain) or may not have taken (the reply was not a definite answer).
type hole struct {
	tx      *types.Transaction
	refused bool
}

// fillGaps fills every hole, in nonce order, so that the transactions after it can be
// mined. A transaction whose broadcast was uncertain is sent again, the same bytes (the
// node answers "already known" if it has it; it is the same settlement, never a second
// one). A refused one is not in the node's pool: its nonce gets a filler, a transfer of 0
// to the signer itself with the refused one's nonce and fees. It reports whether every hole
// is filled; those that are not stay in s.holes, and the next batch fills them before it
// signs anything (runBatch), so no new transaction waits behind one.
func (s *sender) fillGaps() bool {
	for len(s.holes) > 0 {
		h := s.holes[0]
		tx := h.tx
		var err error
		if h.refused {
			to := s.addr
			tx, err = types.SignNewTx(s.key, s.signer, &types.DynamicFeeTx{
				ChainID: s.c.net.ChainID, Nonce: h.tx.Nonce(), GasTipCap: h.tx.GasTipCap(), GasFeeCap: h.tx.GasFeeCap(),
				Gas: params.TxGas, To: &to, Value: new(big.Int),
			})
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), fillerBound)
			err = s.c.client.SendTransaction(ctx, tx)
			cancel()
		}
		// "nonce too low": the slot is used already (the transaction itself, or an earlier
		// filler)
		if err != nil && !isAlreadyKnown(err) && !(isRPCReply(err) && isNonceError(err)) {
			s.log.Warn("nonce gap not filled", zap.Uint64("senderNonce", h.tx.Nonce()), zap.Bool("refused", h.refused), zap.String("error", s.c.redact(err)))
			s.synced = false
			return false
		}
		s.holes = s.holes[1:]
		s.log.Warn("nonce gap filled", zap.Uint64("senderNonce", h.tx.Nonce()), zap.Bool("refused", h.refused), zap.String("tx", tx.Hash().Hex()))
	}
	s.holes = slices.Clip(s.holes)
	if s.synced {
		s.next = max(s.next, s.floor)
	}
	return true
}

// fillerBound bounds the broadcast of one gap filler.
const fillerBound = 10 * time.Second

// errRequestNotSent: a batch request that was never made.
var errRequestNotSent = errors.New("request not sent")

// sendAll broadcasts the transactions of rs in one JSON-RPC batch request (one
// eth_sendRawTransaction alone), and returns each one's error: its own reply, or the
// request's failure for all of them.
// A node that does not take batches gets each transaction in a request of its own
// (chain.batchCall).
func (s *sender) sendAll(rs []*sendReq) []error {
	errs := make([]error, len(rs))
	if len(rs) == 1 {
		errs[0] = s.c.client.SendTransaction(rs[0].ctx, rs[0].tx)
		return errs
	}
	batch := make([]rpc.BatchElem, len(rs))
	for i, r := range rs {
		raw, err := r.tx.MarshalBinary()
		if err != nil {
			// Not for a transaction this sender signed; the request is not sent.
			for j := range errs {
				errs[j] = fmt.Errorf("%w: encode transaction: %w", errRequestNotSent, err)
			}
			return errs
		}
		batch[i] = rpc.BatchElem{Method: "eth_sendRawTransaction", Args: []any{hexutil.Bytes(raw)}, Result: new(common.Hash)}
	}
	// No send's context ends the request for the others: Config.RPCTimeout bounds it, over
	// HTTP by the client's timeout and over a websocket by batchCall's context.
	if err := s.c.batchCall(context.WithoutCancel(rs[0].ctx), batch); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, el := range batch {
		errs[i] = el.Error
	}
	return errs
}

// batchRefused reports whether err, the failure of a JSON-RPC batch request, is the
// endpoint refusing batches: an HTTP status that says the request's form or size is not
// taken (400, 405, 413, 415, 422, 501), or a reply that is one object instead of a list
// (one error for the whole request). Anything else (a timeout, a rate limit, an
// authorization or server error, a broken connection, a list with a malformed element)
// says nothing of batches, and is what it is for every call of the batch.
func batchRefused(err error) bool {
	var he rpc.HTTPError
	if errors.As(err, &he) {
		switch he.StatusCode {
		case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge,
			http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity, http.StatusNotImplemented:
			return true
		}
		return false
	}
	var ute *json.UnmarshalTypeError
	return errors.As(err, &ute) && ute.Value == "object" && ute.Field == ""
}

// abandon answers the sends of rest, signed and journaled but behind a transaction that
// was not broadcast: they are not sent, and their rows are closed before any later batch
// reuses their nonces.
func (s *sender) abandon(rest []*sendReq) {
	for _, r := range rest {
		r.err = fmt.Errorf("%w: an earlier transaction of its batch was not broadcast", errNotBroadcast)
		if r.jn == nil {
			continue
		}
		if err := r.jn.j.Update(r.ctx, r.row.AuthorizationKey, journal.StateFailed, reasonNotBroadcast); err != nil {
			s.log.Error("journal update", zap.String("tx", r.tx.Hash().Hex()), zap.Error(err))
		}
	}
}

// reasonNotBroadcast is the journal reason of a row whose transaction was never sent.
const reasonNotBroadcast = "not_broadcast"

// resend broadcasts an already signed transaction again (same bytes, same hash): it is the
// same transaction, not a second one. "already known" counts as success.
func (s *sender) resend(ctx context.Context, tx *types.Transaction) error {
	err := s.c.client.SendTransaction(ctx, tx)
	if err == nil || isAlreadyKnown(err) {
		return nil
	}
	if isRPCReply(err) {
		if isNonceError(err) {
			s.lead <- struct{}{}
			s.synced = false
			<-s.lead
		}
		return fmt.Errorf("resend %s: node refused: %s", tx.Hash().Hex(), s.c.redact(err))
	}
	return s.c.unavailable("resend transaction", err)
}

// baseFee returns the base fee a transaction must pay to be mined now: the larger of the
// latest block's and the node's forecast for the next block (eth_feeHistory; ignored
// when the node does not answer it).
func (s *sender) baseFee(ctx context.Context) (*big.Int, error) {
	head, err := s.c.client.HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, s.c.unavailable("latest header", err)
	}
	base := new(big.Int)
	if head.BaseFee != nil {
		base.Set(head.BaseFee)
	}
	if h, err := s.c.client.FeeHistory(ctx, 1, nil, nil); err == nil && len(h.BaseFee) > 0 {
		if next := h.BaseFee[len(h.BaseFee)-1]; next != nil && next.Cmp(base) > 0 {
			base.Set(next)
		}
	}
	return base, nil
}

// bumpFees returns the fees of a replacement of a transaction paying oldTip and oldCap:
// each raised by at least 10% and 1 wei (the replacement rule of geth-like pools), the tip
// at least the node's suggestion, the cap at least 2*base + tip. A cap past ceiling (nil:
// none) is lowered to ceiling when that still makes a valid replacement able to pay
// base; otherwise ok is false and nothing may be sent.
func bumpFees(oldTip, oldCap, suggestedTip, base, ceiling *big.Int) (tip, feeCap *big.Int, ok bool) {
	raise := func(v *big.Int) *big.Int {
		step := new(big.Int).Add(v, big.NewInt(9))
		step.Div(step, big.NewInt(10)) // ceil(v/10)
		if step.Sign() == 0 {
			step.SetInt64(1)
		}
		return step.Add(step, v)
	}
	minTip, minCap := raise(oldTip), raise(oldCap)
	tip = new(big.Int).Set(minTip)
	if suggestedTip != nil && suggestedTip.Cmp(tip) > 0 {
		tip.Set(suggestedTip)
	}
	feeCap = new(big.Int).Add(new(big.Int).Mul(base, big.NewInt(2)), tip)
	if feeCap.Cmp(minCap) < 0 {
		feeCap.Set(minCap)
	}
	if ceiling != nil && feeCap.Cmp(ceiling) > 0 {
		feeCap.Set(ceiling)
		if tip.Cmp(feeCap) > 0 {
			tip.Set(feeCap)
		}
	}
	ok = feeCap.Cmp(minCap) >= 0 && tip.Cmp(minTip) >= 0 && feeCap.Cmp(base) >= 0
	return tip, feeCap, ok
}

// sendReplacement signs a replacement of old, a transaction of this sender: same nonce,
// gas, target, value and calldata, with the given fees. Like send, it hands the signed
// replacement to prepare (the journal write) before broadcasting it, and its error wraps
// errNotBroadcast or errBroadcastUnknown. The sender's nonce counter is not touched: the
// replacement takes the slot of old, so at most one of them can be mined.
func (s *sender) sendReplacement(ctx context.Context, old *types.Transaction, tip, feeCap *big.Int, prepare func(*types.Transaction) error) (*types.Transaction, error) {
	from, err := types.Sender(s.signer, old)
	if err != nil || from != s.addr {
		return nil, fmt.Errorf("%w: transaction %s was not signed by this engine's signer", errNotBroadcast, old.Hash().Hex())
	}
	if old.To() == nil {
		return nil, fmt.Errorf("%w: transaction %s creates a contract", errNotBroadcast, old.Hash().Hex())
	}
	to := *old.To()
	tx, err := types.SignNewTx(s.key, s.signer, &types.DynamicFeeTx{
		ChainID: s.c.net.ChainID, Nonce: old.Nonce(), GasTipCap: tip, GasFeeCap: feeCap,
		Gas: old.Gas(), To: &to, Value: old.Value(), Data: old.Data(),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: sign replacement: %w", errNotBroadcast, err)
	}
	if err := prepare(tx); err != nil {
		return nil, fmt.Errorf("%w: %w", errNotBroadcast, err)
	}
	if err := s.c.client.SendTransaction(ctx, tx); err != nil && !isAlreadyKnown(err) {
		if isRPCReply(err) && isDefiniteRefusal(err) {
			return tx, fmt.Errorf("%w: node refused the replacement: %s", errNotBroadcast, s.c.redact(err))
		}
		return tx, fmt.Errorf("%w: %w", errBroadcastUnknown, s.c.unavailable("send replacement", err))
	}
	return tx, nil
}

// isAlreadyKnown reports the node's answer to a transaction it already holds.
func isAlreadyKnown(err error) bool {
	m := strings.ToLower(err.Error())
	return strings.Contains(m, "already known") || strings.Contains(m, "already imported") ||
		strings.Contains(m, "known transaction")
}

// definiteRefusals are the error replies with which a node says it did not take a
// transaction and never will (go-ethereum's and anvil's transaction pool checks). Any
// other reply (a timeout forwarding to a sequencer, a proxy's backend error, a message
// this list does not know) leaves the broadcast's outcome unknown: the journal row then
// stays open and reconcile decides it by nonce and receipt, because a row marked failed
// is final, and the transaction may have propagated all the same
// (docs/facilitator.md#settle-order).
var definiteRefusals = []string{
	"nonce too low", "nonce too high", "insufficient funds", "intrinsic gas too low",
	"exceeds block gas limit", "gas limit reached", "transaction underpriced",
	"replacement transaction underpriced", "less than block base fee", "fee cap less than",
	"tip above fee cap", "max priority fee per gas higher than max fee per gas",
	"invalid sender", "invalid chain id", "only replay-protected", "oversized data",
	"transaction type not supported", "tx type not supported", "txpool is full",
	"exceeds the configured cap", "gas uint64 overflow", "negative value",
}

// isDefiniteRefusal reports a node reply that certainly means the transaction was not
// taken.
func isDefiniteRefusal(err error) bool {
	m := strings.ToLower(err.Error())
	for _, r := range definiteRefusals {
		if strings.Contains(m, r) {
			return true
		}
	}
	return false
}

// isNonceError reports a node refusal caused by the nonce (our local count is off).
func isNonceError(err error) bool {
	m := strings.ToLower(err.Error())
	return strings.Contains(m, "nonce") || strings.Contains(m, "replacement transaction underpriced")
}

// receiptPoll bounds the polling interval of waitReceipt.
const (
	receiptPollMin = 20 * time.Millisecond
	receiptPollMax = 500 * time.Millisecond
	resendEvery    = 3 * time.Second
)

// waitReceipt polls for tx's receipt until it arrives or timeout (bounded by ctx) passes.
// A transaction the node no longer knows (dropped from its pool) is sent again, same bytes.
// It returns ethereum.NotFound when no receipt arrived in time.
func (s *sender) waitReceipt(ctx context.Context, tx *types.Transaction, timeout time.Duration) (*types.Receipt, error) {
	return s.waitReceipts(ctx, []common.Hash{tx.Hash()}, tx, timeout)
}

// waitReceipts is waitReceipt for a settlement with several attempts (fee-bumped
// replacements of one nonce, at most one of which can be mined): it returns the first
// receipt of any of hashes. Only latest, the attempt meant to be mined, is sent again
// when the node no longer knows it.
func (s *sender) waitReceipts(ctx context.Context, hashes []common.Hash, latest *types.Transaction, timeout time.Duration) (*types.Receipt, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	delay := receiptPollMin
	lastResend := time.Now()
	for {
		var err error
		for i := len(hashes) - 1; i >= 0; i-- {
			var r *types.Receipt
			r, err = s.c.client.TransactionReceipt(ctx, hashes[i])
			if err == nil && r != nil {
				return r, nil
			}
			if err != nil && !errors.Is(err, ethereum.NotFound) {
				break
			}
		}
		if err != nil && !errors.Is(err, ethereum.NotFound) && ctx.Err() == nil {
			s.log.Debug("receipt poll", zap.String("tx", latest.Hash().Hex()), zap.String("error", s.c.redact(err)))
		}
		tx := latest
		if errors.Is(err, ethereum.NotFound) && time.Since(lastResend) > resendEvery {
			lastResend = time.Now()
			if _, _, err := s.c.client.TransactionByHash(ctx, tx.Hash()); errors.Is(err, ethereum.NotFound) {
				if err := s.resend(ctx, tx); err != nil {
					s.log.Debug("resend dropped transaction", zap.String("tx", tx.Hash().Hex()), zap.Error(err))
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, ethereum.NotFound
		case <-time.After(delay):
		}
		delay = min(delay*2, receiptPollMax)
	}
}
