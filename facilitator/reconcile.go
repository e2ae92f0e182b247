package facilitator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/facilitator/txsender"
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
	// ReconcileFeeCeiling is not a final state: the outcome reason of a row left unfinished
	// because its transaction needs a fee bump past Config.MaxFeePerGas.
	ReconcileFeeCeiling = "fee_ceiling"
)

// ReconcileReport counts what one Reconcile run did.
type ReconcileReport struct {
	Checked   int // unfinished rows read
	Confirmed int // closed as confirmed (a receipt with status 1 and the Transfer event)
	Failed    int // closed as failed (reverted, settled elsewhere, dropped)
	Resent    int // rows whose signed transaction was sent again, same bytes and hash
	Bumped    int // rows whose transaction was replaced by a fee-bumped one, same nonce and calldata
	Pending   int // rows left unfinished: no receipt within ReceiptTimeout, fee ceiling, or RPC errors
	Recent    int // rows ReconcileIdle left alone: a live settle may still own them
	Skipped   int // rows of networks this engine does not serve, or that are not ready yet
	Outcomes  []ReconcileOutcome
}

// ReconcileOutcome is what Reconcile concluded for one row.
type ReconcileOutcome struct {
	AuthorizationKey string
	TxHash           string        // the attempt whose receipt decided the row, else the latest attempt
	State            journal.State // the row's state after this run
	Reason           string
}

// Reconcile finishes every settlement the journal holds as prepared or broadcast. New
// runs it at start; an operator may run it at any time (docs/facilitator.md#settle-order rule 3:
// reconcile the uncertain transaction, never retry blindly). A row may hold several
// attempts: its first transaction and fee-bumped replacements of it, all with the same
// sender nonce and calldata, so at most one of them can be mined. For each row, on the
// row's network:
//
//   - a receipt of any journaled attempt exists: confirmed when it has status 1 and the
//     expected Transfer event, failed otherwise;
//   - else the authorization is used on chain: failed, ReconcileSettledElsewhere (some
//     other transaction paid the payee; ours will never succeed);
//   - else the sender's mined nonce is past the row's SenderNonce: failed,
//     ReconcileDropped (the slot went to another transaction; the payer was not charged);
//   - else, when the latest attempt is stuck (its fee cap is below the base fee, or it is
//     next in the signer's nonce order and older than Config.StuckAfter) and the row was
//     signed by one of this engine's signer lanes: a replacement, signed by that lane, with
//     the same nonce and calldata and fees raised by the replacement rule (+10% tip and
//     cap, cap >= 2*baseFee + tip, at most Config.MaxFeePerGas) is journaled, then
//     broadcast, and a receipt of any attempt is awaited for Config.ReceiptTimeout. When
//     the ceiling forbids the bump the row stays unfinished with ReconcileFeeCeiling;
//   - else the latest attempt is sent again. It is the same transaction (same bytes, same
//     hash), not a second broadcast of a new one, so the authorization still moves at most
//     once. Its receipt is awaited for Config.ReceiptTimeout.
//
// Rows it cannot decide (RPC errors, no receipt yet) stay unfinished for the next run.
// The error return is for a journal that cannot be read.
func (e *Service) Reconcile(ctx context.Context) (ReconcileReport, error) {
	return e.reconcile(ctx, 0, nil)
}

// ReconcileIdle is Reconcile for rows no live settle can still own: it leaves alone rows
// updated within the bound of a settle's detached part (3 x ReceiptTimeout + 1 min), so
// a periodic run never races a settlement in flight in this or a like-configured
// instance. Such rows count as Recent.
func (e *Service) ReconcileIdle(ctx context.Context) (ReconcileReport, error) {
	return e.reconcile(ctx, e.detachedBound(), nil)
}

// reconcile runs Reconcile on the rows at least minAge old. With only set, it is the
// start-up reconcile of that network (bringUp) and reads no other network's rows;
// otherwise the rows of a network that is not ready are Skipped: its own start-up
// reconcile takes them.
func (e *Service) reconcile(ctx context.Context, minAge time.Duration, only *chain) (ReconcileReport, error) {
	var rep ReconcileReport
	all, err := e.cfg.Journal.Unfinished(ctx)
	if err != nil {
		return rep, fmt.Errorf("reconcile: read journal: %w", err)
	}
	rows := all[:0:0]
	for _, row := range all {
		if only != nil && row.Network != only.net.CAIP2 {
			continue
		}
		if minAge > 0 && e.now().Sub(row.UpdatedAt) < minAge {
			rep.Recent++
			continue
		}
		rows = append(rows, row)
	}
	rep.Checked = len(rows)
	type waiting struct {
		row journal.Settlement
		c   *chain
		p   rowPlan
	}
	var wait []waiting
	for _, row := range rows {
		c, ok := e.chainFor(row.Network)
		if !ok || (only == nil && c.state.get() != NetworkReady) {
			rep.Skipped++
			continue
		}
		p, err := e.planRow(ctx, c, row)
		switch {
		case err != nil:
			e.logChainErr("reconcile", c, err)
			rep.Pending++
			rep.Outcomes = append(rep.Outcomes, ReconcileOutcome{row.AuthorizationKey, row.TxHash.Hex(), row.State, "rpc unavailable"})
		case p.state != "":
			e.reconcileClose(ctx, &rep, row, p.state, p.reason, p.settled)
		case p.latest == nil:
			rep.Pending++
			rep.Outcomes = append(rep.Outcomes, ReconcileOutcome{row.AuthorizationKey, p.latestHash.Hex(), row.State, p.note})
		default:
			if p.bumped {
				rep.Bumped++
			} else {
				rep.Resent++
			}
			wait = append(wait, waiting{row, c, p})
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxReconcileWaits)
	for _, w := range wait {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rcpt, err := w.c.sender.WaitReceipts(ctx, w.p.hashes, w.p.latest, time.Duration(e.cfg.ReceiptTimeout))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rep.Pending++
				rep.Outcomes = append(rep.Outcomes, ReconcileOutcome{w.row.AuthorizationKey, w.p.latest.Hash().Hex(), journal.StateBroadcast, string(x402.ReasonSettlementPending)})
				return
			}
			state, reason := receiptState(w.c, rcpt, w.row)
			e.reconcileClose(ctx, &rep, w.row, state, reason, rcpt.TxHash)
		}()
	}
	wg.Wait()
	e.log.Info("reconcile", zap.Int("checked", rep.Checked), zap.Int("confirmed", rep.Confirmed),
		zap.Int("failed", rep.Failed), zap.Int("resent", rep.Resent), zap.Int("bumped", rep.Bumped),
		zap.Int("pending", rep.Pending))
	return rep, nil
}

// maxReconcileWaits bounds the receipt waits one reconcile run keeps going at once (each
// polls the node until ReceiptTimeout): after an outage that left many rows unfinished, a
// run does not start one poller per row (docs/reliability.md#resource-limits).
const maxReconcileWaits = 32

// noteReceiptHidden is the reconcile note of a row whose attempt the node lists as mined
// but whose receipt it does not return yet.
const noteReceiptHidden = "mined; receipt not yet available"

// attemptMined reports whether the node knows one of hashes as a transaction in a block.
// A used authorization or a used sender nonce without a receipt for any attempt means
// "settled elsewhere" or "dropped" only when none of our attempts is mined: a node (or a
// load balancer in front of several) may show the state a block changed before it serves
// that block's receipts, and concluding "failed" then would lose a payment that settled
// (docs/failure-modes.md).
func (c *chain) attemptMined(ctx context.Context, hashes []common.Hash) (bool, error) {
	for _, h := range hashes {
		_, pending, err := c.Client.TransactionByHash(ctx, h)
		switch {
		case errors.Is(err, ethereum.NotFound):
		case err != nil:
			return false, c.Unavailable("transaction", err)
		case !pending:
			return true, nil
		}
	}
	return false, nil
}

// rowPlan is what planRow decided for one row: a final state, or attempts to await, or
// neither (the row stays unfinished, for note).
type rowPlan struct {
	state   journal.State // final state; "" when the row stays unfinished
	reason  string
	settled common.Hash    // the attempt whose receipt decided state, if any
	receipt *types.Receipt // that receipt

	hashes     []common.Hash      // every journaled attempt, oldest first
	latest     *types.Transaction // the attempt sent (again) whose receipt to await; nil: none
	latestHash common.Hash        // the latest journaled attempt
	bumped     bool               // latest is a replacement signed by this run
	note       string             // why the row stays unfinished without a wait
}

// planRow decides one row and acts on it: sends its latest attempt again or a fee-bumped
// replacement (see Reconcile). An error is an RPC or journal failure: the row is left as
// it is.
func (e *Service) planRow(ctx context.Context, c *chain, row journal.Settlement) (rowPlan, error) {
	first, from, ok := firstAttempt(c, row)
	if !ok {
		return rowPlan{state: journal.StateFailed, reason: ReconcileBadRawTx}, nil
	}
	attempts, err := e.cfg.Journal.Attempts(ctx, row.AuthorizationKey)
	if err != nil {
		return rowPlan{}, fmt.Errorf("journal attempts: %w", err)
	}
	latest, last, hashes := latestAttempt(first, attempts)
	p := rowPlan{hashes: hashes, latestHash: latest.Hash()}
	// Chain state is read before the receipts, so a transaction mined in between shows up
	// as a receipt rather than as "settled elsewhere" or "dropped".
	mined, err := c.Client.NonceAt(ctx, from, nil)
	if err != nil {
		return rowPlan{}, c.Unavailable("sender nonce", err)
	}
	used, err := c.authorizationSpent(ctx, row)
	if err != nil {
		return rowPlan{}, err
	}
	for i := len(p.hashes) - 1; i >= 0; i-- {
		rcpt, err := c.Client.TransactionReceipt(ctx, p.hashes[i])
		switch {
		case err == nil && rcpt != nil:
			p.state, p.reason = receiptState(c, rcpt, row)
			p.settled, p.receipt = p.hashes[i], rcpt
			return p, nil
		case err != nil && !errors.Is(err, ethereum.NotFound):
			return rowPlan{}, c.Unavailable("receipt", err)
		}
	}
	if used || mined > row.SenderNonce {
		ours, err := c.attemptMined(ctx, p.hashes)
		switch {
		case err != nil:
			return rowPlan{}, err
		case ours:
			// Our own attempt is in a block whose receipt the node does not show yet: the
			// used authorization or nonce is ours, not another transaction's.
			p.note = noteReceiptHidden
			return p, nil
		case used:
			p.state, p.reason = journal.StateFailed, ReconcileSettledElsewhere
			return p, nil
		default:
			p.state, p.reason = journal.StateFailed, ReconcileDropped
			return p, nil
		}
	}
	if ln, ours := c.pool.laneOf(from); ours {
		stuck, base, err := e.stuck(ctx, c, latest, last, mined == row.SenderNonce)
		if err != nil {
			return rowPlan{}, err
		}
		if stuck {
			// replaced by the lane that sent it: only its key signs for its nonce
			return e.bump(ctx, c, ln, row, p, first, latest, last, base)
		}
	}
	if err := c.sender.Resend(ctx, latest); err != nil {
		return rowPlan{}, err
	}
	e.markBroadcast(ctx, row, latest)
	e.log.Info("reconcile: resent journaled transaction", zap.String("payer", row.Payer.Hex()), zap.String("tx", latest.Hash().Hex()))
	p.latest = latest
	return p, nil
}

// firstAttempt decodes row's first journaled transaction and its sender; ok is false when
// it does not decode to the row's hash or has no valid signature (ReconcileBadRawTx).
func firstAttempt(c *chain, row journal.Settlement) (first *types.Transaction, from common.Address, ok bool) {
	first = new(types.Transaction)
	if err := first.UnmarshalBinary(row.RawTx); err != nil || first.Hash() != row.TxHash {
		return nil, common.Address{}, false
	}
	from, err := types.Sender(types.LatestSignerForChainID(c.net.ChainID), first)
	if err != nil {
		return nil, common.Address{}, false
	}
	return first, from, true
}

// latestAttempt returns the newest usable attempt of a row whose first transaction is
// first, the journal's record of it, and the hashes of every attempt, oldest first. A
// replacement is only ever used when it decodes to its journaled hash and keeps the first
// transaction's nonce and calldata; its hash is watched regardless.
func latestAttempt(first *types.Transaction, attempts []journal.Attempt) (*types.Transaction, journal.Attempt, []common.Hash) {
	latest, last := first, attempts[0]
	hashes := make([]common.Hash, 0, len(attempts))
	for _, a := range attempts {
		hashes = append(hashes, a.TxHash)
		tx := new(types.Transaction)
		if a.Seq > 0 && tx.UnmarshalBinary(a.RawTx) == nil && tx.Hash() == a.TxHash &&
			tx.Nonce() == first.Nonce() && bytes.Equal(tx.Data(), first.Data()) {
			latest, last = tx, a
		}
	}
	return latest, last, hashes
}

// stuck reports whether latest, the newest attempt of a row, needs a fee-bumped
// replacement: its fee cap is below the base fee, or it is next in the signer's nonce
// order (head) and was journaled at least Config.StuckAfter ago. It returns the base fee.
func (e *Service) stuck(ctx context.Context, c *chain, latest *types.Transaction, last journal.Attempt, head bool) (bool, *big.Int, error) {
	base, err := c.sender.BaseFee(ctx)
	if err != nil {
		return false, nil, err
	}
	if latest.GasFeeCap().Cmp(base) < 0 {
		return true, base, nil
	}
	return head && e.cfg.StuckAfter > 0 && e.now().Sub(last.CreatedAt) >= e.cfg.StuckAfter, base, nil
}

// bump replaces latest, the newest attempt of row, with a fee-bumped transaction of the
// same nonce and calldata, signed by ln, the lane that sent it: journaled (AddAttempt)
// before it is broadcast.
func (e *Service) bump(ctx context.Context, c *chain, ln *lane, row journal.Settlement, p rowPlan,
	first, latest *types.Transaction, last journal.Attempt, base *big.Int) (rowPlan, error) {
	suggested, err := c.Client.SuggestGasTipCap(ctx)
	if err != nil {
		return rowPlan{}, c.Unavailable("suggest gas tip", err)
	}
	ceiling := e.cfg.MaxFeePerGas
	if ceiling == nil {
		ceiling = new(big.Int).Mul(first.GasFeeCap(), big.NewInt(DefaultMaxFeeFactor))
	}
	tip, feeCap, ok := txsender.BumpFees(latest.GasTipCap(), latest.GasFeeCap(), suggested, base, ceiling)
	if !ok {
		e.log.Warn("reconcile: settlement stuck, fee bump would pass the fee ceiling",
			zap.String("payer", row.Payer.Hex()), zap.String("tx", latest.Hash().Hex()),
			zap.Uint64("senderNonce", latest.Nonce()), zap.String("feeCap", latest.GasFeeCap().String()),
			zap.String("baseFee", base.String()), zap.String("maxFeePerGas", ceiling.String()))
		// The same bytes again keep the attempt in the node's pool, should fees fall.
		if err := c.sender.Resend(ctx, latest); err != nil {
			e.logChainErr("reconcile: resend stuck transaction", c, err)
		}
		p.note = ReconcileFeeCeiling
		return p, nil
	}
	seq := last.Seq + 1
	tx, err := ln.sender.SendReplacement(ctx, latest, tip, feeCap, func(tx *types.Transaction) error {
		raw, err := tx.MarshalBinary()
		if err != nil {
			return fmt.Errorf("encode replacement: %w", err)
		}
		return e.cfg.Journal.AddAttempt(ctx, row.AuthorizationKey, journal.Attempt{Seq: seq, TxHash: tx.Hash(), RawTx: raw, CreatedAt: e.now()})
	})
	switch {
	case errors.Is(err, journal.ErrAttemptConflict):
		// Another reconciler bumped (or closed) the row first: its attempt is theirs to await.
		p.note = "bumped concurrently"
		return p, nil
	case tx == nil && err != nil:
		return rowPlan{}, err
	}
	p.hashes = append(p.hashes, tx.Hash())
	p.latestHash = tx.Hash()
	if errors.Is(err, txsender.ErrNotBroadcast) {
		// Journaled, refused by the node: the row stays for the next run, which starts
		// from this attempt's fees.
		e.logChainErr("reconcile: fee bump refused", c, err)
		p.note = "fee bump refused"
		return p, nil
	}
	if err != nil {
		e.logChainErr("reconcile: fee bump broadcast", c, err)
	}
	e.markBroadcast(ctx, row, tx)
	e.log.Info("reconcile: fee-bumped stuck transaction", zap.String("payer", row.Payer.Hex()),
		zap.String("replaced", latest.Hash().Hex()), zap.String("tx", tx.Hash().Hex()),
		zap.Uint64("senderNonce", tx.Nonce()), zap.Int("attempt", seq),
		zap.String("feeCap", feeCap.String()), zap.String("tip", tip.String()), zap.String("baseFee", base.String()))
	p.latest, p.bumped = tx, true
	return p, nil
}

// markBroadcast records that row's transaction tx was sent.
func (e *Service) markBroadcast(ctx context.Context, row journal.Settlement, tx *types.Transaction) {
	if err := e.cfg.Journal.Update(ctx, row.AuthorizationKey, journal.StateBroadcast, ""); err != nil {
		e.log.Error("journal update", zap.String("tx", tx.Hash().Hex()), zap.Error(err))
	}
}

// receiptState maps a receipt of row's transaction to the row's final state.
func receiptState(c *chain, r *types.Receipt, row journal.Settlement) (journal.State, string) {
	a := x402.Authorization{From: row.Payer, To: row.PayTo, Value: row.Amount}
	if f := checkReceipt(c, r, row.Asset, a); f != nil {
		return journal.StateFailed, string(f.reason)
	}
	return journal.StateConfirmed, ""
}

// reconcileClose writes a row's final state and counts it. settled is the attempt whose
// receipt decided it (zero: none), recorded as the row's settling attempt.
func (e *Service) reconcileClose(ctx context.Context, rep *ReconcileReport, row journal.Settlement, state journal.State, reason string, settled common.Hash) {
	var err error
	if settled != (common.Hash{}) {
		err = e.cfg.Journal.UpdateSettled(ctx, row.AuthorizationKey, state, reason, settled)
	} else {
		err = e.cfg.Journal.Update(ctx, row.AuthorizationKey, state, reason)
	}
	hash := row.TxHash
	if settled != (common.Hash{}) {
		hash = settled
	}
	if err != nil {
		e.log.Error("journal update", zap.String("tx", hash.Hex()), zap.Error(err))
		rep.Pending++
		rep.Outcomes = append(rep.Outcomes, ReconcileOutcome{row.AuthorizationKey, hash.Hex(), row.State, "journal update failed"})
		return
	}
	if state == journal.StateConfirmed {
		rep.Confirmed++
	} else {
		rep.Failed++
	}
	e.log.Info("reconcile: closed", zap.String("payer", row.Payer.Hex()), zap.String("tx", hash.Hex()),
		zap.String("state", string(state)), zap.String("reason", reason))
	rep.Outcomes = append(rep.Outcomes, ReconcileOutcome{row.AuthorizationKey, hash.Hex(), state, reason})
}
