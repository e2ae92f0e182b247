package facilitator

import (
	"time"

	"context"
	"errors"
	"fmt"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/x402"
)

// ReasonNoSettlement is SettlementStatus's reason when the journal holds no settlement of
// the payment: it was never broadcast by this facilitator (or its journal).
const ReasonNoSettlement x402.Reason = "no_settlement"

// SettlementStatus reports the outcome of the settlement of p for r that Settle left
// unknown (settlement_pending, or an error after the broadcast). It broadcasts nothing,
// except to take over a settlement another instance journaled and never sent (below).
// It reads the journal row of p's authorization, which must be of this exact payment
// (payer, payee, amount, asset, network and nonce):
//
//   - confirmed: Success true with the transaction whose receipt settled it;
//   - failed: Success false with the failure reason;
//   - prepared or broadcast: the receipts of the row's journaled attempts are read once.
//     A receipt with status 1 and the expected Transfer event confirms the row; another
//     receipt, the authorization used by some other transaction (a cancelAuthorization,
//     another facilitator), or the sender nonce taken by another transaction fail it; the
//     journal is updated either way. Otherwise it stays settlement_pending, with the
//     latest attempt's hash;
//   - takeover: a row still prepared (never marked broadcast), signed by another signer
//     than this engine's and unchanged for Config.TakeoverAfter, was left by an instance
//     that died between journaling and broadcasting. Its latest journaled attempt is sent
//     again, the same signed bytes and hash (never a new transaction, never a fee bump),
//     the row is marked broadcast, and its receipt is awaited within ctx and
//     Config.ReceiptTimeout: it decides the row as above; none, or a send the node
//     refused, leaves it settlement_pending (docs/facilitator.md#takeover);
//   - no row, or a row of another payment: Success false, ReasonNoSettlement.
//
// An error means the journal or the chain could not be read; the outcome stays unknown.
func (e *Service) SettlementStatus(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
	v := versionOf(p)
	resp := x402.SettleResponse{Payer: payerOf(p)}
	refuse := func(reason x402.Reason, msg string) (x402.SettleResponse, error) {
		resp.Success, resp.ErrorReason, resp.ErrorMessage = false, reason.For(v), msg
		if reason == ReasonNoSettlement {
			resp.ErrorReason = string(reason)
		}
		return resp, nil
	}
	if p == nil || r == nil || p.Authorization.Value == nil {
		return refuse(x402.ReasonInvalidPayload, "no payment to look up")
	}
	resp.Network = e.networkName(p.Network, v)
	resp.Amount = p.Authorization.Value.String()
	key := x402.KeyOf(p, r)
	row, err := e.cfg.Journal.Get(ctx, key.AuthorizationKey())
	if errors.Is(err, journal.ErrNotFound) {
		return refuse(ReasonNoSettlement, "this facilitator journaled no settlement of the payment")
	}
	if err != nil {
		return resp, fmt.Errorf("settlement status: %w", err)
	}
	if row.PaymentKey != key.String() {
		return refuse(ReasonNoSettlement, "the journaled settlement of this authorization is of another payment")
	}
	setTx := func(h common.Hash) { resp.Transaction, resp.TxHash = h.Hex(), h.Hex() }
	setTx(row.TxHash)
	attempts, err := e.cfg.Journal.Attempts(ctx, row.AuthorizationKey)
	if err != nil {
		return resp, fmt.Errorf("settlement status: %w", err)
	}
	hashes := make([]common.Hash, 0, len(attempts))
	for _, a := range attempts {
		hashes = append(hashes, a.TxHash)
		if a.Settled {
			setTx(a.TxHash)
		}
	}
	if row.State != journal.StateConfirmed && row.State != journal.StateFailed {
		setTx(hashes[len(hashes)-1])
	}
	switch row.State {
	case journal.StateConfirmed:
		resp.Success = true
		return resp, nil
	case journal.StateFailed:
		return refuse(failedReason(row.Reason), "the settlement failed: "+row.Reason)
	}
	c, ok := e.chainFor(row.Network)
	if !ok {
		return resp, fmt.Errorf("settlement status: network %s is not served", row.Network)
	}
	state, reason, settled, err := e.decideRow(ctx, c, row, attempts)
	if err != nil {
		e.logChainErr("settlement status", c, err)
		return resp, fmt.Errorf("settlement status: %w", err)
	}
	if state == "" {
		return refuse(x402.ReasonSettlementPending, "no receipt yet; the transaction may still be mined")
	}
	if settled != (common.Hash{}) {
		setTx(settled)
	}
	if settled != (common.Hash{}) {
		err = e.cfg.Journal.UpdateSettled(ctx, row.AuthorizationKey, state, reason, settled)
	} else {
		err = e.cfg.Journal.Update(ctx, row.AuthorizationKey, state, reason)
	}
	if err != nil {
		// The chain decided; the journal lags and Reconcile will close the row.
		e.log.Error("journal update", zap.String("tx", resp.Transaction), zap.Error(err))
	}
	e.log.Info("settlement status: decided", zap.String("payer", resp.Payer), zap.String("tx", resp.Transaction),
		zap.String("state", string(state)), zap.String("reason", reason))
	if state == journal.StateConfirmed {
		resp.Success = true
		return resp, nil
	}
	return refuse(failedReason(reason), "the settlement failed: "+reason)
}

// decideRow decides an unfinished row from the chain (rowStatus) and, when the chain
// does not decide it yet and the row is another signer's left unsent, takes it over.
// state is "" while the row stays unfinished.
func (e *Service) decideRow(ctx context.Context, c *chain, row journal.Settlement, attempts []journal.Attempt) (state journal.State, reason string, settled common.Hash, err error) {
	first, from, ok := firstAttempt(c, row)
	if !ok {
		return journal.StateFailed, ReconcileBadRawTx, common.Hash{}, nil
	}
	latest, _, hashes := latestAttempt(first, attempts)
	state, reason, settled, err = e.rowStatus(ctx, c, row, from, hashes)
	if err != nil || state != "" || !e.takeoverDue(c, row, from) {
		return state, reason, settled, err
	}
	state, reason, settled = e.takeOver(ctx, c, row, latest, hashes)
	return state, reason, settled, nil
}

// takeoverDue reports whether row, which the chain does not decide yet, is to be taken
// over: it is still prepared (never marked broadcast), its transaction was signed by
// a signer that is none of this engine's lanes on c (a row of our own lanes is their
// senders', and our reconcile's), and it has not changed for Config.TakeoverAfter.
func (e *Service) takeoverDue(c *chain, row journal.Settlement, from common.Address) bool {
	_, ours := c.pool.laneOf(from)
	return e.cfg.TakeoverAfter > 0 && row.State == journal.StatePrepared && !ours &&
		e.now().Sub(row.UpdatedAt) >= e.cfg.TakeoverAfter
}

// takeOver sends latest, the newest journaled attempt of another signer's row, again:
// the same signed bytes, so the same transaction, which the node takes, or answers
// "already known" (sent), or refuses (the row stays unfinished; "nonce too low" is
// decided by the next status read, as after Reconcile's resend). Once sent, the row is
// marked broadcast and a receipt of any attempt is awaited within ctx and
// Config.ReceiptTimeout; state is "" when none came.
func (e *Service) takeOver(ctx context.Context, c *chain, row journal.Settlement, latest *types.Transaction, hashes []common.Hash) (state journal.State, reason string, settled common.Hash) {
	if err := c.sender.Resend(ctx, latest); err != nil {
		e.logChainErr("settlement status: take over", c, err)
		return "", "", common.Hash{}
	}
	e.markBroadcast(ctx, row, latest)
	e.log.Info("settlement status: took over a journaled settlement of another signer",
		zap.String("payer", row.Payer.Hex()), zap.String("tx", latest.Hash().Hex()))
	rcpt, err := c.sender.WaitReceipts(ctx, hashes, latest, time.Duration(e.cfg.ReceiptTimeout))
	if err != nil {
		return "", "", common.Hash{}
	}
	state, reason = receiptState(c, rcpt, row)
	return state, reason, rcpt.TxHash
}

// rowStatus decides an unfinished row, whose transactions the account from signed, from
// the chain, as Reconcile's planRow does, but acts on nothing: state is "" while no
// journaled attempt has a receipt and neither the authorization nor the sender nonce was
// used by another transaction.
func (e *Service) rowStatus(ctx context.Context, c *chain, row journal.Settlement, from common.Address, hashes []common.Hash) (state journal.State, reason string, settled common.Hash, err error) {
	// Chain state is read before the receipts, so a transaction mined in between shows up
	// as a receipt rather than as "settled elsewhere" or "dropped".
	mined, err := c.Client.NonceAt(ctx, from, nil)
	if err != nil {
		return "", "", common.Hash{}, c.Unavailable("sender nonce", err)
	}
	used, err := c.authorizationSpent(ctx, row)
	if err != nil {
		return "", "", common.Hash{}, err
	}
	for i := len(hashes) - 1; i >= 0; i-- {
		rcpt, err := c.Client.TransactionReceipt(ctx, hashes[i])
		switch {
		case err == nil && rcpt != nil:
			state, reason = receiptState(c, rcpt, row)
			return state, reason, hashes[i], nil
		case err != nil && !errors.Is(err, ethereum.NotFound):
			return "", "", common.Hash{}, c.Unavailable("receipt", err)
		}
	}
	if used || mined > row.SenderNonce {
		// As in planRow: our own attempt mined without a visible receipt stays undecided.
		switch ours, err := c.attemptMined(ctx, hashes); {
		case err != nil:
			return "", "", common.Hash{}, err
		case ours:
			return "", "", common.Hash{}, nil
		case used:
			return journal.StateFailed, ReconcileSettledElsewhere, common.Hash{}, nil
		default:
			return journal.StateFailed, ReconcileDropped, common.Hash{}, nil
		}
	}
	return "", "", common.Hash{}, nil
}

// failedReason maps a journal row's failure reason to an x402 reason.
func failedReason(s string) x402.Reason {
	if r := x402.ReasonFromWire(s); r == x402.ReasonTransferEventMismatch {
		return r
	}
	return x402.ReasonTransactionFailed
}
