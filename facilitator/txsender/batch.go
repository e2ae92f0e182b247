package txsender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/journal"
)

// Journaled is how Send journals a transaction before broadcasting it. Every journaled
// send of one sender names the same journal.
type Journaled struct {
	// Journal is the settlement journal.
	Journal journal.Journal
	// Row is the journal row of the signed transaction.
	Row func(*types.Transaction) (journal.Settlement, error)
	// After, if set, runs once the row is durable and before the broadcast; an error stops
	// the broadcast (the crash test seam).
	After func(journal.Settlement) error
}

// sendReq is one send waiting in, or handled by, a batch.
type sendReq struct {
	ctx  context.Context
	cl   Call
	jn   *Journaled
	tx   *types.Transaction
	row  journal.Settlement
	err  error
	done chan struct{}
}

// Send signs cl with the next nonce, journals the signed transaction through jn (nil: not
// journaled; when set, the row must be durable before anything is broadcast), and
// broadcasts it. The error wraps ErrNotBroadcast (journaling failed, or the node refused
// the transaction, or an earlier transaction of its batch was not broadcast: the nonce is
// not used) or ErrBroadcastUnknown (the transaction may be in the node's pool). A journal
// refusal keeps its error (journal.ErrDuplicateSettlement), with no transaction.
func (s *Sender) Send(ctx context.Context, cl Call, jn *Journaled) (*types.Transaction, error) {
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
func (s *Sender) runBatch(ctx context.Context, batch []*sendReq) {
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
		failAll(batch, fmt.Errorf("%w: %w", ErrNotBroadcast, err))
		return
	}
	if len(s.holes) > 0 && !s.fillGaps() {
		// the transactions after a hole would wait behind it: send nothing more until it is
		// filled (nothing is journaled or sent; the payers are not charged)
		failAll(batch, fmt.Errorf("%w: %w: a nonce gap before a taken transaction is not filled yet", ErrNotBroadcast, ErrRPCUnavailable))
		return
	}
	if !s.synced {
		n, err := s.node.Client.PendingNonceAt(ctx, s.addr)
		if err != nil {
			failAll(batch, fmt.Errorf("%w: %w", ErrNotBroadcast, s.node.Unavailable("pending nonce", err)))
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
			to := r.cl.To
			r.tx, err = types.SignNewTx(s.key, s.signer, &types.DynamicFeeTx{
				ChainID: s.chainID, Nonce: s.next + uint64(i), GasTipCap: tip, GasFeeCap: feeCap,
				Gas: r.cl.Gas, To: &to, Value: new(big.Int), Data: r.cl.Data,
			})
			if err != nil {
				r.tx, r.err, drop[r] = nil, fmt.Errorf("%w: sign: %w", ErrNotBroadcast, err), true
				continue
			}
			if r.jn == nil {
				continue
			}
			if r.row, err = r.jn.Row(r.tx); err != nil {
				r.tx, r.err, drop[r] = nil, fmt.Errorf("%w: journal prepare: %w", ErrNotBroadcast, err), true
				continue
			}
			rows, owner, j = append(rows, r.row), append(owner, r), r.jn.Journal
		}
		if len(drop) == 0 && len(rows) > 0 {
			err = j.PrepareAll(ctx, rows)
			var dup *journal.DuplicatesError
			switch {
			case errors.As(err, &dup):
				for _, i := range dup.Index {
					r := owner[i]
					r.tx, r.err, drop[r] = nil, fmt.Errorf("%w: journal prepare %s: %w", ErrNotBroadcast,
						r.row.AuthorizationKey, journal.ErrDuplicateSettlement), true
				}
			case err != nil:
				failAll(pending, fmt.Errorf("%w: journal prepare: %w", ErrNotBroadcast, err))
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
// single send: taken (or already known), refused for certain (ErrNotBroadcast), or
// outcome unknown (ErrBroadcastUnknown). After a chunk with any transaction not taken, the
// later chunks are not sent: their rows are closed as failed (not_broadcast), and the
// next batch signs from the first unused nonce. A refused transaction that leaves a gap
// before ones the node took has its nonce taken by a filler (fillGaps), so they are mined.
func (s *Sender) broadcast(pending []*sendReq) {
	for i, r := range pending {
		if r.jn != nil && r.jn.After != nil {
			if err := r.jn.After(r.row); err != nil {
				r.tx, r.err = nil, fmt.Errorf("%w: before broadcast: %w", ErrNotBroadcast, err)
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
func (s *Sender) broadcastChunk(chunk []*sendReq) bool {
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
		case IsRPCReply(err) && isDefiniteRefusal(err):
			if isNonceError(err) {
				s.synced = false
			}
			r.err = fmt.Errorf("%w: node refused the transaction: %s", ErrNotBroadcast, s.node.Redact(err))
			missing = append(missing, hole{tx: r.tx, refused: true})
		case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, errRequestNotSent):
			r.err = fmt.Errorf("%w: %w", ErrNotBroadcast, s.node.Unavailable("send transaction", err))
			missing = append(missing, hole{tx: r.tx, refused: true})
		default:
			s.synced = false
			r.err = fmt.Errorf("%w: %w", ErrBroadcastUnknown, s.node.Unavailable("send transaction", err))
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
func (s *Sender) fillGaps() bool {
	for len(s.holes) > 0 {
		h := s.holes[0]
		tx := h.tx
		var err error
		if h.refused {
			to := s.addr
			tx, err = types.SignNewTx(s.key, s.signer, &types.DynamicFeeTx{
				ChainID: s.chainID, Nonce: h.tx.Nonce(), GasTipCap: h.tx.GasTipCap(), GasFeeCap: h.tx.GasFeeCap(),
				Gas: params.TxGas, To: &to, Value: new(big.Int),
			})
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), fillerBound)
			err = s.node.Client.SendTransaction(ctx, tx)
			cancel()
		}
		// "nonce too low": the slot is used already (the transaction itself, or an earlier
		// filler)
		if err != nil && !isAlreadyKnown(err) && !(IsRPCReply(err) && isNonceError(err)) {
			s.log.Warn("nonce gap not filled", zap.Uint64("senderNonce", h.tx.Nonce()), zap.Bool("refused", h.refused), zap.String("error", s.node.Redact(err)))
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
func (s *Sender) sendAll(rs []*sendReq) []error {
	errs := make([]error, len(rs))
	if len(rs) == 1 {
		errs[0] = s.node.Client.SendTransaction(rs[0].ctx, rs[0].tx)
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
	if err := s.node.BatchCall(context.WithoutCancel(rs[0].ctx), batch); err != nil {
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
func (s *Sender) abandon(rest []*sendReq) {
	for _, r := range rest {
		r.err = fmt.Errorf("%w: an earlier transaction of its batch was not broadcast", ErrNotBroadcast)
		if r.jn == nil {
			continue
		}
		if err := r.jn.Journal.Update(r.ctx, r.row.AuthorizationKey, journal.StateFailed, ReasonNotBroadcast); err != nil {
			s.log.Error("journal update", zap.String("tx", r.tx.Hash().Hex()), zap.Error(err))
		}
	}
}

// ReasonNotBroadcast is the journal reason of a row whose transaction was never sent.
const ReasonNotBroadcast = "not_broadcast"
