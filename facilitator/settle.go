package facilitator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/facilitator/txsender"
	"github.com/x402gate/x402gate/internal/faults"
	"github.com/x402gate/x402gate/x402"
)

// Settle settles the merchant payment p of r (docs/facilitator.md#settle-order), in this order:
//
//  1. Check the signature, the exact match and the time window; the verdict is not asked
//     again. A settle refused here touches no approval, so a forged settle naming an
//     approved payment cannot use it up.
//  2. When the verdict check applies, consume the matching unexpired approval atomically
//     before anything is broadcast (docs/facilitator.md#settle-order rule 1); it stays consumed whatever
//     follows (docs/facilitator.md#approval-records), then check the token's state: balance and unused nonce. VerdictRequired always demands one. VerdictOptional demands one
//     when the payment was sent to the verdict service: /verify leaves a marker before it
//     asks for a verdict, and a settle that finds no approval claims that marker (in step
//     4, once the payment proved settleable), so a payment once submitted for a verdict
//     is never settled without a consumed approval.
//  3. Simulate (eth_call with a kept gas limit, else eth_estimateGas); a revert is mapped
//     to a reason and nothing is sent.
//  4. Claim the authorization in the approval.Store, so concurrent settles on every
//     instance sharing the store make one broadcast (duplicate_settlement for the others).
//     A settle refused before this step leaves nothing claimed and may be tried again.
//  5. Sign with the engine's next nonce, journal the signed transaction, then broadcast.
//  6. Await the receipt for Config.ReceiptTimeout: status 1 and a Transfer(from, to,
//     value) log of the asset confirm it. No receipt in time is settlement_pending with
//     the transaction hash; the journal row stays "broadcast" for Reconcile, and the
//     authorization is never broadcast again in a new transaction.
//
// Settle runs every step. Through InProcess, when its Verify proved this very payment (the
// same payment and requirements values, less than proofTTL ago), step 1 does not recover
// the signature again and step 2 does not read the token's state again: the simulation of
// step 3 is the token's own check of the moment.
func (e *Service) Settle(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
	res, err := e.settle(ctx, p, r, true, nil)
	return res.resp, err
}

// settleResult is a settle response with its reason code, so internal callers (the
// verification fee) need not parse the wire string back.
type settleResult struct {
	resp   x402.SettleResponse
	reason x402.Reason
}

// settle runs Settle; withApproval is false for the verification fee, which needs none;
// pr is what Verify proved of p, or nil for the full checks.
func (e *Service) settle(ctx context.Context, p *x402.Payment, r *x402.Requirements, withApproval bool, pr *proof) (settleResult, error) {
	v := versionOf(p)
	res := settleResult{resp: x402.SettleResponse{Payer: payerOf(p)}}
	if p != nil {
		res.resp.Network = e.networkName(p.Network, v)
		if p.Authorization.Value != nil {
			res.resp.Amount = p.Authorization.Value.String()
		}
		if p.Scheme == x402.SchemeUpto && r != nil && r.Amount != nil {
			res.resp.Amount = r.Amount.String() // what this settle moves, at most the signed maximum
		}
	}
	refuse := func(f *failure) (settleResult, error) {
		f.reason = reasonFor(p, f.reason)
		res.reason = f.reason
		res.resp.Success = false
		res.resp.ErrorReason = f.reason.For(v)
		res.resp.ErrorMessage = f.msg
		e.log.Info("settle refused", zap.String("payer", res.resp.Payer), zap.String("reason", string(f.reason)),
			zap.String("tx", res.resp.Transaction))
		return res, nil
	}
	if p == nil || r == nil {
		_, f := e.checkStatic(p, r, e.now(), nil)
		return refuse(f)
	}
	key := x402.KeyOf(p, r)
	// The signature and the exact match are checked before the approval is touched: an
	// unsigned or forged settle naming an approved payment's key must not consume it.
	// The token's state is read after, so a genuine payment whose settlement then fails
	// (nonce used, funds short) has consumed its approval all the same.
	c, f := e.checkSigned(ctx, p, r, pr)
	if f != nil {
		return refuse(f)
	}
	needMarker, approvedBy := false, ""
	if withApproval {
		if approvedBy, needMarker, f = e.consumeApproval(ctx, key); f != nil {
			return refuse(f)
		}
	}
	faults.Point("settle.after-approval")
	// An upto settle of 0 moves nothing: it is claimed below, so the authorization is spent
	// for this facilitator, and never broadcast (docs/payments.md#upto).
	nothing := c.r.Amount.Sign() == 0
	if !c.proven && !nothing {
		if f := e.checkTokenState(ctx, c); f != nil {
			return refuse(f)
		}
	}
	var cl txsender.Call
	if c.wrap == nil && !nothing {
		if cl, f = e.simulate(ctx, c); f != nil {
			return refuse(f)
		}
	}
	if needMarker {
		// Claimed only now, after the payment proved settleable, so a settle refused
		// above (chain down, funds short) leaves the payment free to settle later.
		if f := e.claimVerdictMarker(ctx, key); f != nil {
			return refuse(f)
		}
	}
	var ln *lane
	if !nothing {
		// A lane is taken before the claim: a settle that finds no lane (every key short of
		// gas, or the caller gone while all were full) claims nothing and may be retried.
		if ln, f = e.acquireLane(ctx, c); f != nil {
			return refuse(f)
		}
	}
	var spent *big.Int
	defer func() {
		if ln != nil {
			c.chain.pool.release(ln, spent)
		}
	}()
	if f := e.claim(ctx, c); f != nil {
		return refuse(f)
	}
	if nothing {
		// Reported to the verdict service as nothing moved: the reservation of the approved
		// maximum is released at once.
		e.reportSettled(ctx, approvedBy, c.r.Amount)
		res.resp.Success = true
		e.log.Info("settled nothing", zap.String("payer", res.resp.Payer), zap.String("network", c.chain.net.CAIP2))
		return res, nil
	}
	// The authorization is claimed: from here the settlement runs to its end even if the
	// caller goes away (an HTTP client hanging up cancels its request's context), so what
	// is broadcast and what the journal says agree. It stays bounded.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.detachedBound())
	defer cancel()
	if c.wrap != nil {
		// ERC-6492: deploy the wallet through its allow-listed factory, then simulate
		// against the deployed wallet; the token's ERC-1271 check is authoritative.
		if f := e.deployWallet(ctx, c); f != nil {
			return refuse(f)
		}
		if cl, f = e.simulate(ctx, c); f != nil {
			return refuse(f)
		}
	}
	tx, err := ln.sender.Send(ctx, cl, e.journaled(c, ln.addr))
	if tx != nil {
		res.resp.Transaction, res.resp.TxHash = tx.Hash().Hex(), tx.Hash().Hex()
	}
	switch {
	case errors.Is(err, journal.ErrDuplicateSettlement):
		res.resp.Transaction, res.resp.TxHash = "", ""
		return refuse(fail(x402.ReasonDuplicateSettlement, "this authorization is already journaled for settlement"))
	case errors.Is(err, txsender.ErrBroadcastUnknown):
		e.logChainErr("broadcast", c.chain, err)
		return refuse(fail(x402.ReasonSettlementPending, "broadcast outcome unknown; reconcile before retrying"))
	case errors.Is(err, txsender.ErrNotBroadcast) && tx != nil:
		// The journal row exists but the node refused the transaction, for certain: it was
		// never in the node's pool and no money moved. The answer names no transaction, so
		// a gate answers a refusal (402) instead of an outcome to reconcile (502 with a
		// retry credit).
		res.resp.Transaction, res.resp.TxHash = "", ""
		e.journalUpdate(ctx, c, journal.StateFailed, txsender.ReasonNotBroadcast)
		e.logChainErr("broadcast refused", c.chain, err)
		if errors.Is(err, txsender.ErrRPCUnavailable) {
			return refuse(fail(x402.ReasonChainUnavailable, "rpc unavailable"))
		}
		return refuse(fail(x402.ReasonUnexpectedSettle, "the node refused the settlement transaction"))
	case errors.Is(err, txsender.ErrRPCUnavailable):
		e.logChainErr("prepare broadcast", c.chain, err)
		res.resp.Transaction, res.resp.TxHash = "", ""
		return refuse(fail(x402.ReasonChainUnavailable, "rpc unavailable"))
	case err != nil:
		// The journal could not be written (or a crash was simulated): nothing was sent.
		res.resp.Transaction, res.resp.TxHash = "", ""
		res.reason = x402.ReasonUnexpectedSettle
		res.resp.ErrorReason = x402.ReasonUnexpectedSettle.For(v)
		res.resp.ErrorMessage = "settlement could not be journaled"
		e.log.Error("settle: journal before broadcast", zap.String("payer", res.resp.Payer), zap.Error(err))
		return res, fmt.Errorf("settle %s: %w", key.AuthorizationKey(), err)
	}
	faults.Point("settle.after-broadcast")
	// Neither the broadcast mark nor the confirmation below holds the answer: a crash
	// that loses them leaves the row prepared or broadcast, and Reconcile decides it by
	// its receipt (docs/facilitator.md#settlement-journal). The receipt is polled at once.
	e.journalLater(c, journal.StateBroadcast, nil)
	e.log.Info("settlement broadcast", zap.String("payer", res.resp.Payer), zap.String("tx", tx.Hash().Hex()),
		zap.String("network", c.chain.net.CAIP2), zap.Uint64("senderNonce", tx.Nonce()))

	rcpt, err := c.chain.sender.WaitReceipt(ctx, tx, time.Duration(e.cfg.ReceiptTimeout))
	if err != nil {
		var latest common.Hash
		if rcpt, latest = e.settleBump(ctx, c, tx); latest != (common.Hash{}) {
			res.resp.Transaction, res.resp.TxHash = latest.Hex(), latest.Hex()
		}
		if rcpt == nil {
			return refuse(fail(x402.ReasonSettlementPending, "no receipt yet; the transaction may still be mined"))
		}
		res.resp.Transaction, res.resp.TxHash = rcpt.TxHash.Hex(), rcpt.TxHash.Hex()
	}
	faults.Point("settle.after-receipt")
	spent = receiptCost(rcpt)
	if f := checkReceipt(c.chain, rcpt, c.r.Asset, x402.Authorization{From: c.auth.From, To: c.auth.To, Value: c.r.Amount}); f != nil {
		e.journalSettled(ctx, c, journal.StateFailed, string(f.reason), rcpt.TxHash)
		return refuse(f)
	}
	e.journalLater(c, journal.StateConfirmed, &rcpt.TxHash)
	e.reportSettled(ctx, approvedBy, movedOf(p, c.r))
	faults.Point("settle.before-answer")
	res.resp.Success = true
	e.log.Info("settled", zap.String("payer", res.resp.Payer), zap.String("tx", rcpt.TxHash.Hex()),
		zap.String("network", c.chain.net.CAIP2))
	return res, nil
}

// settleBump runs after the receipt wait of tx, a settlement's first transaction, ran
// out. When tx's fee cap is below the base fee, the row is decided as Reconcile would
// (planRow): a receipt that turned up is returned; a stuck transaction is replaced by a
// fee-bumped one (journaled first), and a receipt of either is awaited once more for
// Config.ReceiptTimeout. latest is the newest journaled attempt's hash (zero when nothing
// changed). Otherwise, or when the row was decided some other way (settled elsewhere,
// dropped, fee ceiling), it returns no receipt and leaves the row to Reconcile.
func (e *Service) settleBump(ctx context.Context, c *checked, tx *types.Transaction) (rcpt *types.Receipt, latest common.Hash) {
	base, err := c.chain.sender.BaseFee(ctx)
	if err != nil || tx.GasFeeCap().Cmp(base) >= 0 {
		return nil, common.Hash{}
	}
	row, err := e.cfg.Journal.Get(ctx, c.key.AuthorizationKey())
	if err != nil || row.TxHash != tx.Hash() || (row.State != journal.StateBroadcast && row.State != journal.StatePrepared) {
		return nil, common.Hash{}
	}
	p, err := e.planRow(ctx, c.chain, row)
	switch {
	case err != nil:
		e.logChainErr("settle: fee bump", c.chain, err)
		return nil, common.Hash{}
	case p.receipt != nil:
		return p.receipt, common.Hash{}
	case !p.bumped:
		return nil, p.latestHash
	}
	rcpt, err = c.chain.sender.WaitReceipts(ctx, p.hashes, p.latest, time.Duration(e.cfg.ReceiptTimeout))
	if err != nil {
		return nil, p.latest.Hash()
	}
	return rcpt, p.latest.Hash()
}

// acquireLane takes a slot of a signer lane for c's settlement (pool.acquire): a Permit2
// payment's comes from the primary signer, the address an upto witness names and the one
// its simulation ran as; an EIP-3009 payment's from the least busy lane.
func (e *Service) acquireLane(ctx context.Context, c *checked) (*lane, *failure) {
	var only *lane
	if c.p.Permit2 != nil {
		only = c.chain.pool.primary()
	}
	ln, err := c.chain.pool.acquire(ctx, only)
	switch {
	case errors.Is(err, ErrRelayerInsufficientFunds):
		return nil, fail(x402.ReasonChainUnavailable, "%s", err.Error())
	case err != nil:
		return nil, fail(x402.ReasonChainUnavailable, "no signer lane free before the request ended")
	}
	return ln, nil
}

// detachedBound bounds the part of a settle that outlives its caller: a wallet deployment
// and the settlement, each a send plus a receipt wait, and a fee-bumped replacement's
// receipt wait.
func (e *Service) detachedBound() time.Duration {
	return 3*time.Duration(e.cfg.ReceiptTimeout) + time.Minute
}

// consumeApproval applies docs/facilitator.md#settle-order rule 1 for the engine's GUARDIAN_MODE. In
// optional mode a payment with no approval may still settle if it was never sent to the
// verdict service: needMarker then tells the caller to claim its verdict marker
// (claimVerdictMarker) before the broadcast. requestHash is the consumed approval's verdict.
func (e *Service) consumeApproval(ctx context.Context, k x402.PaymentKey) (requestHash string, needMarker bool, f *failure) {
	if e.cfg.VerdictMode == VerdictOff {
		return "", false, nil
	}
	a, err := e.cfg.Store.Consume(ctx, k)
	switch {
	case err == nil:
		e.log.Info("approval consumed", zap.String("payer", k.Payer.Hex()), zap.String("requestHash", a.RequestHash))
		if e.cfg.VerdictMode == VerdictOptional {
			e.markers.release(k.Payer) // its marker's payment is settling: no longer outstanding
		}
		return a.RequestHash, false, nil
	case !errors.Is(err, approval.ErrNotFound):
		e.log.Error("consume approval", zap.String("payer", k.Payer.Hex()), zap.Error(err))
		return "", false, fail(x402.ReasonApprovalStoreDown, "approval store unavailable")
	case e.cfg.VerdictMode == VerdictRequired:
		return "", false, fail(x402.ReasonApprovalNotFound, "no unexpired approval for this payment")
	}
	return "", true, nil
}

// claimVerdictMarker lets an optional-mode settle without approval go ahead only for a
// payment never sent to the verdict service. Claiming the marker also stops a later
// verdict request from racing this settle.
func (e *Service) claimVerdictMarker(ctx context.Context, k x402.PaymentKey) *failure {
	err := e.cfg.Store.Claim(ctx, markerKey(k), maxClaimTTL)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, approval.ErrAlreadyClaimed):
		return fail(x402.ReasonApprovalNotFound, "payment was sent for a verdict and has no unexpired approval")
	default:
		e.log.Error("claim verdict marker", zap.String("payer", k.Payer.Hex()), zap.Error(err))
		return fail(x402.ReasonApprovalStoreDown, "approval store unavailable")
	}
}

// claim takes the store-wide settlement claim on c's authorization.
func (e *Service) claim(ctx context.Context, c *checked) *failure {
	err := e.cfg.Store.Claim(ctx, c.key, untilValidBefore(c.auth, e.now(), claimMargin))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, approval.ErrAlreadyClaimed):
		return fail(x402.ReasonDuplicateSettlement, "this authorization is already being settled")
	default:
		e.log.Error("claim authorization", zap.String("payer", c.auth.From.Hex()), zap.Error(err))
		return fail(x402.ReasonApprovalStoreDown, "approval store unavailable")
	}
}

// simulate packs the settlement of c and runs it without broadcasting (the token's own
// checks, or the proxy's and Permit2's), which also sets the transaction's gas limit:
// transferWithAuthorization on the token, or the settle of the x402 proxy of a Permit2
// payment, for c.r.Amount.
func (e *Service) simulate(ctx context.Context, c *checked) (txsender.Call, *failure) {
	to, mapRevert, refusal := c.chain.net.USDC.Address, revertReason, "the token refuses the transfer"
	var data []byte
	var err error
	if a := c.p.Permit2; a != nil {
		to, mapRevert, refusal = a.Spender, permit2RevertReason, "the x402 proxy or Permit2 refuses the settlement"
		data, err = c.chain.abi.proxySettleCalldata(a, c.r.Amount, c.sig)
	} else {
		data, err = c.chain.transferCalldata(c.auth, c.sig, c.eoa)
	}
	if err != nil {
		return txsender.Call{}, fail(x402.ReasonInvalidSignature, "signature cannot be encoded for the token")
	}
	// An EOA signature runs the token's own code only, whose gas the sender's kept limit
	// bounds (docs/facilitator.md#gas-limit); a contract signer's isValidSignature is its
	// own code, so its transfer is estimated every time.
	simulate := c.chain.sender.Estimate
	if c.eoa {
		simulate = c.chain.sender.Simulate
	}
	cl, err := simulate(ctx, to, data)
	if err != nil {
		e.logChainErr("simulate settlement", c.chain, err)
		if errors.Is(err, txsender.ErrRPCUnavailable) {
			return txsender.Call{}, fail(x402.ReasonChainUnavailable, "rpc unavailable")
		}
		return txsender.Call{}, fail(mapRevert(err), "%s", refusal)
	}
	return cl, nil
}

// revertReason maps a token revert to a reason, like @x402/evm parseEip3009TransferError
// (docs/facilitator.md#verify).
func revertReason(err error) x402.Reason {
	m := strings.ToLower(err.Error())
	switch {
	case strings.Contains(m, "expired"):
		return x402.ReasonValidBefore
	case strings.Contains(m, "not yet valid"):
		return x402.ReasonValidAfter
	case strings.Contains(m, "used") || strings.Contains(m, "canceled") || strings.Contains(m, "cancelled"):
		return x402.ReasonNonceUsed
	case strings.Contains(m, "balance"):
		return x402.ReasonInsufficientFunds
	case strings.Contains(m, "signature") || strings.Contains(m, "signer"):
		return x402.ReasonInvalidSignature
	}
	return x402.ReasonTransactionFailed
}

// deployWallet sends the ERC-6492 factory call of c's wallet and waits for it. The
// factory was allow-listed at verify.
func (e *Service) deployWallet(ctx context.Context, c *checked) *failure {
	cl, err := c.chain.sender.Estimate(ctx, c.wrap.Factory, c.wrap.Calldata)
	if err != nil {
		if errors.Is(err, txsender.ErrRPCUnavailable) {
			return fail(x402.ReasonChainUnavailable, "rpc unavailable")
		}
		return fail(x402.ReasonUndeployedWallet, "wallet deployment would revert")
	}
	tx, err := c.chain.sender.Send(ctx, cl, nil)
	if err != nil {
		e.logChainErr("deploy wallet", c.chain, err)
		return fail(x402.ReasonUndeployedWallet, "wallet deployment was not sent")
	}
	rcpt, err := c.chain.sender.WaitReceipt(ctx, tx, time.Duration(e.cfg.ReceiptTimeout))
	if err != nil || rcpt.Status != types.ReceiptStatusSuccessful {
		return fail(x402.ReasonUndeployedWallet, "wallet deployment did not succeed")
	}
	ok, err := c.chain.hasCode(ctx, c.auth.From)
	if err != nil || !ok {
		return fail(x402.ReasonUndeployedWallet, "factory did not deploy the payer's wallet")
	}
	c.wrap = nil
	return nil
}

// checkReceipt confirms a mined settlement: status 1 and a Transfer(from, to, value) log
// emitted by the asset (docs/facilitator.md#verify, 2.27 extras). For a Permit2 payment,
// Permit2's transferFrom makes the token emit it.
func checkReceipt(ch *chain, r *types.Receipt, asset common.Address, a x402.Authorization) *failure {
	if r.Status != types.ReceiptStatusSuccessful {
		return fail(x402.ReasonTransactionFailed, "settlement transaction reverted")
	}
	fromTopic := common.BytesToHash(a.From.Bytes())
	toTopic := common.BytesToHash(a.To.Bytes())
	want := common.LeftPadBytes(a.Value.Bytes(), 32)
	for _, l := range r.Logs {
		if l.Address == asset && len(l.Topics) == 3 && l.Topics[0] == ch.abi.transferTopic &&
			l.Topics[1] == fromTopic && l.Topics[2] == toTopic && bytes.Equal(l.Data, want) {
			return nil
		}
	}
	return fail(x402.ReasonTransferEventMismatch, "receipt lacks the expected Transfer event")
}
