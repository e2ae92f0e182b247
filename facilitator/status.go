package facilitator

import (
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
// unknown (settlement_pending, or an error after the broadcast), without broadcasting
// anything. It reads the journal row of p's authorization, which must be of this exact
// payment (payer, payee, amount, asset, network and nonce):
//
//   - confirmed: Success true with the transaction whose receipt settled it;
//   - failed: Success false with the failure reason;
//   - prepared or broadcast: the receipts of the row's journaled attempts are read once.
//     A receipt with status 1 and the expected Transfer event confirms the row; another
//     receipt, the authorization used by some other transaction (a cancelAuthorization,
//     another facilitator), or the sender nonce taken by another transaction fail it; the
//     journal is updated either way. Otherwise it stays settlement_pending, with the
//     latest attempt's hash;
//   - no row, or a row of another payment: Success false, ReasonNoSettlement.
//
// An error means the journal or the chain could not be read; the outcome stays unknown.
func (e *Engine) SettlementStatus(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
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
	state, reason, settled, err := e.rowStatus(ctx, c, row, hashes)
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

// rowStatus decides an unfinished row from the chain, as Reconcile's planRow does, but
// acts on nothing: state is "" while no journaled attempt has a receipt and neither the
// authorization nor the sender nonce was used by another transaction.
func (e *Engine) rowStatus(ctx context.Context, c *chain, row journal.Settlement, hashes []common.Hash) (state journal.State, reason string, settled common.Hash, err error) {
	first := new(types.Transaction)
	if err := first.UnmarshalBinary(row.RawTx); err != nil || first.Hash() != row.TxHash {
		return journal.StateFailed, ReconcileBadRawTx, common.Hash{}, nil
	}
	from, err := types.Sender(types.LatestSignerForChainID(c.net.ChainID), first)
	if err != nil {
		return journal.StateFailed, ReconcileBadRawTx, common.Hash{}, nil
	}
	// Chain state is read before the receipts, so a transaction mined in between shows up
	// as a receipt rather than as "settled elsewhere" or "dropped".
	mined, err := c.client.NonceAt(ctx, from, nil)
	if err != nil {
		return "", "", common.Hash{}, c.unavailable("sender nonce", err)
	}
	used, err := c.authorizationUsed(ctx, row.Payer, row.Nonce)
	if err != nil {
		return "", "", common.Hash{}, err
	}
	for i := len(hashes) - 1; i >= 0; i-- {
		rcpt, err := c.client.TransactionReceipt(ctx, hashes[i])
		switch {
		case err == nil && rcpt != nil:
			state, reason = receiptState(c, rcpt, row)
			return state, reason, hashes[i], nil
		case err != nil && !errors.Is(err, ethereum.NotFound):
			return "", "", common.Hash{}, c.unavailable("receipt", err)
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
