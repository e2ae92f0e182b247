package facilitator

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/core/types"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/x402"
)

// Reasons Reconcile writes to the journal for rows it closes as failed.
const (
	// ReconcileSettledElsewhere: the authorization is used on chain, but not by the
	// journaled transaction (another facilitator broadcast it). The payee was paid once,
	// by that other transaction; ours can no longer succeed.
	ReconcileSettledElsewhere = "settled_by_other_transaction"
	// ReconcileDropped: the journaled transaction's sender nonce was used by another
	// transaction and the authorization is unused: ours was dropped, the payer was not
	// charged.
	ReconcileDropped = "dropped"
	// ReconcileBadRawTx: the journaled transaction does not decode.
	ReconcileBadRawTx = "undecodable_raw_tx"
)

// ReconcileReport counts what one Reconcile run did.
type ReconcileReport struct {
	Checked   int // unfinished rows read
	Confirmed int // closed as confirmed (a receipt with status 1 and the Transfer event)
	Failed    int // closed as failed (reverted, settled elsewhere, dropped)
	Resent    int // rows whose signed transaction was sent again, same bytes and hash
	Pending   int // rows left unfinished: no receipt within ReceiptTimeout, or RPC errors
	Skipped   int // rows of networks this engine does not serve
	Outcomes  []ReconcileOutcome
}

// ReconcileOutcome is what Reconcile concluded for one row.
type ReconcileOutcome struct {
	AuthorizationKey string
	TxHash           string
	State            SettlementState // the row's state after this run
	Reason           string
}

// Reconcile finishes every settlement the journal holds as prepared or broadcast. New
// runs it at start; an operator may run it at any time (spec §4.2 /settle rule 3:
// reconcile the uncertain transaction, never retry blindly). For each row, on the row's
// network:
//
//   - a receipt of the journaled transaction exists: confirmed when it has status 1 and
//     the expected Transfer event, failed otherwise;
//   - else the authorization is used on chain: failed, ReconcileSettledElsewhere (some
//     other transaction paid the payee; ours will never succeed);
//   - else the sender's mined nonce is past the row's SenderNonce: failed,
//     ReconcileDropped (the slot went to another transaction; the payer was not charged);
//   - else the journaled signed transaction is sent again. It is the same transaction
//     (same bytes, same hash), not a second broadcast of a new one, so the authorization
//     still moves at most once. Its receipt is awaited for Config.ReceiptTimeout.
//
// Rows it cannot decide (RPC errors, no receipt yet) stay unfinished for the next run.
// The error return is for a journal that cannot be read.
func (e *Engine) Reconcile(ctx context.Context) (ReconcileReport, error) {
	var rep ReconcileReport
	rows, err := e.cfg.Journal.Unfinished(ctx)
	if err != nil {
		return rep, fmt.Errorf("reconcile: read journal: %w", err)
	}
	rep.Checked = len(rows)
	type waiting struct {
		row Settlement
		c   *chain
		tx  *types.Transaction
	}
	var wait []waiting
	for _, row := range rows {
		c, ok := e.chainFor(row.Network)
		if !ok {
			rep.Skipped++
			continue
		}
		tx := new(types.Transaction)
		if err := tx.UnmarshalBinary(row.RawTx); err != nil || tx.Hash() != row.TxHash {
			e.reconcileClose(ctx, &rep, row, StateFailed, ReconcileBadRawTx)
			continue
		}
		state, reason, err := e.reconcileRow(ctx, c, row, tx)
		switch {
		case err != nil:
			e.logChainErr("reconcile", c, err)
			rep.Pending++
			rep.Outcomes = append(rep.Outcomes, ReconcileOutcome{row.AuthorizationKey, row.TxHash.Hex(), row.State, "rpc unavailable"})
		case state == StateBroadcast:
			rep.Resent++
			wait = append(wait, waiting{row, c, tx})
		default:
			e.reconcileClose(ctx, &rep, row, state, reason)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range wait {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rcpt, err := w.c.sender.waitReceipt(ctx, w.tx, e.cfg.ReceiptTimeout)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rep.Pending++
				rep.Outcomes = append(rep.Outcomes, ReconcileOutcome{w.row.AuthorizationKey, w.row.TxHash.Hex(), StateBroadcast, string(x402.ReasonSettlementPending)})
				return
			}
			state, reason := receiptState(w.c, rcpt, w.row)
			e.reconcileClose(ctx, &rep, w.row, state, reason)
		}()
	}
	wg.Wait()
	e.log.Info("reconcile", zap.Int("checked", rep.Checked), zap.Int("confirmed", rep.Confirmed),
		zap.Int("failed", rep.Failed), zap.Int("resent", rep.Resent), zap.Int("pending", rep.Pending))
	return rep, nil
}

// reconcileRow decides one row. It returns StateBroadcast when the transaction was sent
// again and its receipt must be awaited.
func (e *Engine) reconcileRow(ctx context.Context, c *chain, row Settlement, tx *types.Transaction) (SettlementState, string, error) {
	from, err := types.Sender(types.LatestSignerForChainID(c.net.ChainID), tx)
	if err != nil {
		return StateFailed, ReconcileBadRawTx, nil
	}
	// Chain state is read before the receipt, so a transaction mined in between shows up
	// as a receipt rather than as "settled elsewhere" or "dropped".
	mined, err := c.client.NonceAt(ctx, from, nil)
	if err != nil {
		return "", "", c.unavailable("sender nonce", err)
	}
	used, err := c.authorizationUsed(ctx, row.Payer, row.Nonce)
	if err != nil {
		return "", "", err
	}
	rcpt, err := c.client.TransactionReceipt(ctx, row.TxHash)
	switch {
	case err == nil && rcpt != nil:
		state, reason := receiptState(c, rcpt, row)
		return state, reason, nil
	case err != nil && !errors.Is(err, ethereum.NotFound):
		return "", "", c.unavailable("receipt", err)
	case used:
		return StateFailed, ReconcileSettledElsewhere, nil
	case mined > row.SenderNonce:
		return StateFailed, ReconcileDropped, nil
	}
	if err := c.sender.resend(ctx, tx); err != nil {
		return "", "", err
	}
	if err := e.cfg.Journal.Update(ctx, row.AuthorizationKey, StateBroadcast, ""); err != nil {
		e.log.Error("journal update", zap.String("tx", row.TxHash.Hex()), zap.Error(err))
	}
	e.log.Info("reconcile: resent journaled transaction", zap.String("payer", row.Payer.Hex()), zap.String("tx", row.TxHash.Hex()))
	return StateBroadcast, "", nil
}

// receiptState maps a receipt of row's transaction to the row's final state.
func receiptState(c *chain, r *types.Receipt, row Settlement) (SettlementState, string) {
	a := x402.Authorization{From: row.Payer, To: row.PayTo, Value: row.Amount}
	if f := checkReceipt(c, r, a); f != nil {
		return StateFailed, string(f.reason)
	}
	return StateConfirmed, ""
}

// reconcileClose writes a row's final state and counts it.
func (e *Engine) reconcileClose(ctx context.Context, rep *ReconcileReport, row Settlement, state SettlementState, reason string) {
	if err := e.cfg.Journal.Update(ctx, row.AuthorizationKey, state, reason); err != nil {
		e.log.Error("journal update", zap.String("tx", row.TxHash.Hex()), zap.Error(err))
		rep.Pending++
		rep.Outcomes = append(rep.Outcomes, ReconcileOutcome{row.AuthorizationKey, row.TxHash.Hex(), row.State, "journal update failed"})
		return
	}
	if state == StateConfirmed {
		rep.Confirmed++
	} else {
		rep.Failed++
	}
	e.log.Info("reconcile: closed", zap.String("payer", row.Payer.Hex()), zap.String("tx", row.TxHash.Hex()),
		zap.String("state", string(state)), zap.String("reason", reason))
	rep.Outcomes = append(rep.Outcomes, ReconcileOutcome{row.AuthorizationKey, row.TxHash.Hex(), state, reason})
}
