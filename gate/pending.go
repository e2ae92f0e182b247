package gate

import (
	"context"
	"encoding/json"
	"errors"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/gate/credit"
	"github.com/x402gate/x402gate/gate/payledger"
	"github.com/x402gate/x402gate/x402"
)

// When the outcome of a settlement is unknown at answer time (the facilitator answers
// settlement_pending, or the settle call failed after a broadcast), the gate answers 502,
// but the transfer may still be mined: re-sending the same payment header would then be
// refused (nonce already used) and the payer would have paid for nothing. So, when the
// facilitator can report a settlement's outcome later (Facilitator.SettlementStatus), the
// 502 carries a fresh retry token (X-PAYMENT-RETRY) and the payment's record turns
// Pending (docs/gate.md#payment-ledger). The same payment header with that token (or the
// payment identifier it was sent under) is let through once the facilitator reports the
// settlement confirmed; while it is still pending it gets 502 again; when the settlement
// failed (reverted, dropped, or the payer cancelled the authorization) it gets 402 and
// the record is forgotten, since nothing moved.

// canReportStatus asks the facilitator for the settlement's status once, and reports
// whether it can answer such a question at all: a pending credit is worth granting only
// when its redemption can learn the outcome.
func (g *Gate) canReportStatus(ctx context.Context, req *x402.Requirements, p *x402.Payment) bool {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.settleTimeout)
	defer cancel()
	_, err := g.f.SettlementStatus(sctx, p, req)
	return !errors.Is(err, errors.ErrUnsupported)
}

// pend records the 502 res of a settlement whose outcome is unknown on the record h
// holds: Pending, with a fresh retry token in res's X-PAYMENT-RETRY header, when the
// facilitator can check the settlement later; otherwise the record stays Reserved and a
// later attempt of the same header resumes it. It returns res.
func (g *Gate) pend(ctx context.Context, req *x402.Requirements, p *x402.Payment, h *credit.Lease, res *Result) *Result {
	if !g.canReportStatus(ctx, req, p) {
		g.end(ctx, h, payledger.Release)
		return res
	}
	data, err := json.Marshal(res.Settlement)
	if err != nil {
		g.end(ctx, h, payledger.Release)
		return res
	}
	token, hash, err := credit.NewToken()
	if err != nil {
		g.log.Error("x402 retry token unavailable", zap.Error(err))
		g.end(ctx, h, payledger.Release)
		return res
	}
	h.Release()
	ok, err := g.ledger.Pend(ctx, h.Key(), h.Owner(), hash, data)
	if err != nil {
		g.log.Error("x402 payment ledger unavailable", zap.Error(err))
		return res
	}
	if ok {
		res.Header.Set(HeaderPaymentRetry, token)
		g.log.Info("x402 settlement outcome unknown; pending retry granted", zap.String("payer", res.Payer))
	}
	return res
}

// redeemPending handles a Pending record whose lease it took (the request presents its
// retry token or its payment identifier): it asks the facilitator for the settlement's
// outcome and lets the request through only when it is confirmed (the record becomes
// Settled, and this is the payment's first run), answers 502 while it is pending
// (releasing the lease), and 402 when it failed (forgetting the record: nothing moved).
func (g *Gate) redeemPending(ctx context.Context, req *x402.Requirements, p *x402.Payment, h *credit.Lease, data []byte) *Result {
	var prior Settlement
	if err := json.Unmarshal(data, &prior); err != nil || !sameAddress(prior.Payer, p.Authorization.From) {
		g.end(ctx, h, payledger.Release)
		return g.ledgerDown(req, p, errors.New("a pending record holds no settlement"))
	}
	sr, s, err := g.settlementStatus(ctx, req, p)
	if s.Transaction == "" {
		s.Transaction = prior.Transaction
	}
	reason := x402.ReasonFromWire(sr.ErrorReason)
	switch {
	case err != nil:
		g.end(ctx, h, payledger.Release)
		return g.statusUnavailable(req, p, s, err, "the settlement's outcome is still unknown; retry later with the same retry token")
	case sr.Success && isTxHash(s.Transaction):
		return g.record(ctx, req, p, h, g.confirmedRun(req, p, s, "x402 pending settlement confirmed; paid request proceeds"))
	case sr.Success, reason == x402.ReasonSettlementPending, reason == x402.ReasonUnexpectedSettle, reason == "":
		// Still unknown (v1 writes settlement_pending as unexpected_settle_error).
		g.end(ctx, h, payledger.Release)
		s.ErrorReason = x402.ReasonSettlementPending.V2()
		return g.settleUnknown(req, p, s, nil, "the settlement is still pending; retry later with the same retry token")
	}
	g.forget(ctx, h)
	s.Success = false
	g.rebuildResponseHeader(s)
	return g.rejected(req, p, reason, sr.ErrorMessage, s, nil)
}
