package txsender

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"go.uber.org/zap"
)

// Resend broadcasts an already signed transaction again (same bytes, same hash): it is the
// same transaction, not a second one. "already known" counts as success.
func (s *Sender) Resend(ctx context.Context, tx *types.Transaction) error {
	err := s.node.Client.SendTransaction(ctx, tx)
	if err == nil || isAlreadyKnown(err) {
		return nil
	}
	if IsRPCReply(err) {
		if isNonceError(err) {
			s.lead <- struct{}{}
			s.synced = false
			<-s.lead
		}
		return fmt.Errorf("resend %s: node refused: %s", tx.Hash().Hex(), s.node.Redact(err))
	}
	return s.node.Unavailable("resend transaction", err)
}

// BaseFee returns the base fee a transaction must pay to be mined now: the larger of the
// latest block's and the node's forecast for the next block (eth_feeHistory; ignored
// when the node does not answer it).
func (s *Sender) BaseFee(ctx context.Context) (*big.Int, error) {
	head, err := s.node.Client.HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, s.node.Unavailable("latest header", err)
	}
	base := new(big.Int)
	if head.BaseFee != nil {
		base.Set(head.BaseFee)
	}
	if h, err := s.node.Client.FeeHistory(ctx, 1, nil, nil); err == nil && len(h.BaseFee) > 0 {
		if next := h.BaseFee[len(h.BaseFee)-1]; next != nil && next.Cmp(base) > 0 {
			base.Set(next)
		}
	}
	return base, nil
}

// BumpFees returns the fees of a replacement of a transaction paying oldTip and oldCap:
// each raised by at least 10% and 1 wei (the replacement rule of geth-like pools), the tip
// at least the node's suggestion, the cap at least 2*base + tip. A cap past ceiling (nil:
// none) is lowered to ceiling when that still makes a valid replacement able to pay
// base; otherwise ok is false and nothing may be sent.
func BumpFees(oldTip, oldCap, suggestedTip, base, ceiling *big.Int) (tip, feeCap *big.Int, ok bool) {
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

// SendReplacement signs a replacement of old, a transaction of this sender: same nonce,
// gas, target, value and calldata, with the given fees. Like send, it hands the signed
// replacement to prepare (the journal write) before broadcasting it, and its error wraps
// ErrNotBroadcast or ErrBroadcastUnknown. The sender's nonce counter is not touched: the
// replacement takes the slot of old, so at most one of them can be mined.
func (s *Sender) SendReplacement(ctx context.Context, old *types.Transaction, tip, feeCap *big.Int, prepare func(*types.Transaction) error) (*types.Transaction, error) {
	from, err := types.Sender(s.signer, old)
	if err != nil || from != s.addr {
		return nil, fmt.Errorf("%w: transaction %s was not signed by this engine's signer", ErrNotBroadcast, old.Hash().Hex())
	}
	if old.To() == nil {
		return nil, fmt.Errorf("%w: transaction %s creates a contract", ErrNotBroadcast, old.Hash().Hex())
	}
	to := *old.To()
	tx, err := types.SignNewTx(s.key, s.signer, &types.DynamicFeeTx{
		ChainID: s.chainID, Nonce: old.Nonce(), GasTipCap: tip, GasFeeCap: feeCap,
		Gas: old.Gas(), To: &to, Value: old.Value(), Data: old.Data(),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: sign replacement: %w", ErrNotBroadcast, err)
	}
	if err := prepare(tx); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotBroadcast, err)
	}
	if err := s.node.Client.SendTransaction(ctx, tx); err != nil && !isAlreadyKnown(err) {
		if IsRPCReply(err) && isDefiniteRefusal(err) {
			return tx, fmt.Errorf("%w: node refused the replacement: %s", ErrNotBroadcast, s.node.Redact(err))
		}
		return tx, fmt.Errorf("%w: %w", ErrBroadcastUnknown, s.node.Unavailable("send replacement", err))
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
	"account limit exceeded", // go-ethereum: the sender's pool slots are full
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

// receiptPoll bounds the polling interval of waitReceipt. The first poll comes as soon
// as the node accepted the transaction; a node that mines at once (anvil's automine, a
// sequencer's preconfirmation) often has the receipt a moment later, not at once (anvil:
// a fraction of a millisecond), so the second comes receiptPollMin after the first and the
// interval doubles from there: 0.25, 0.5, 1, 2 ms ... still 12 polls in the first second.
const (
	receiptPollMin = 250 * time.Microsecond
	receiptPollMax = 500 * time.Millisecond
	resendEvery    = 3 * time.Second
)

// nextReceiptPoll is the interval after delay in waitReceipt's polling.
func nextReceiptPoll(delay time.Duration) time.Duration { return min(delay*2, receiptPollMax) }

// WaitReceipt polls for tx's receipt until it arrives or timeout (bounded by ctx) passes.
// A transaction the node no longer knows (dropped from its pool) is sent again, same bytes.
// It returns ethereum.NotFound when no receipt arrived in time.
func (s *Sender) WaitReceipt(ctx context.Context, tx *types.Transaction, timeout time.Duration) (*types.Receipt, error) {
	return s.WaitReceipts(ctx, []common.Hash{tx.Hash()}, tx, timeout)
}

// WaitReceipts is WaitReceipt for a settlement with several attempts (fee-bumped
// replacements of one nonce, at most one of which can be mined): it returns the first
// receipt of any of hashes. Only latest, the attempt meant to be mined, is sent again
// when the node no longer knows it.
func (s *Sender) WaitReceipts(ctx context.Context, hashes []common.Hash, latest *types.Transaction, timeout time.Duration) (*types.Receipt, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	delay := receiptPollMin
	lastResend := time.Now()
	for {
		var err error
		for i := len(hashes) - 1; i >= 0; i-- {
			var r *types.Receipt
			r, err = s.node.Client.TransactionReceipt(ctx, hashes[i])
			if err == nil && r != nil {
				return r, nil
			}
			if err != nil && !errors.Is(err, ethereum.NotFound) {
				break
			}
		}
		if err != nil && !errors.Is(err, ethereum.NotFound) && ctx.Err() == nil {
			s.log.Debug("receipt poll", zap.String("tx", latest.Hash().Hex()), zap.String("error", s.node.Redact(err)))
		}
		tx := latest
		if errors.Is(err, ethereum.NotFound) && time.Since(lastResend) > resendEvery {
			lastResend = time.Now()
			if _, _, err := s.node.Client.TransactionByHash(ctx, tx.Hash()); errors.Is(err, ethereum.NotFound) {
				if err := s.Resend(ctx, tx); err != nil {
					s.log.Debug("resend dropped transaction", zap.String("tx", tx.Hash().Hex()), zap.Error(err))
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, ethereum.NotFound
		case <-time.After(delay):
		}
		delay = nextReceiptPoll(delay)
	}
}
