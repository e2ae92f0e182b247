package gate

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/x402"
)

// settle settles a verified payment.
func (g *Gate) settle(ctx context.Context, req *x402.Requirements, p *x402.Payment, verdict *VerdictOutcome) *Result {
	payer := p.Authorization.From.Hex()
	// Settlement is not abandoned when the client goes away: a half-done settle is the
	// uncertain case docs/facilitator.md#settle-order rule 3 warns about. Only SettleTimeout
	// and the attempt's lease on the payment's record (docs/gate.md#payment-ledger) bound it.
	ev := g.settleCall(ctx, req, p)
	sr, err := ev.Response, ev.Err
	s := g.settlement(req, p, sr)
	switch {
	case err != nil:
		g.log.Error("x402 settle failed", zap.String("payer", payer), zap.String("tx", sr.Transaction), zap.Error(err))
		return g.settleUnknown(req, p, s, verdict, "the facilitator could not settle the payment; its outcome is unknown, do not retry blindly")
	case !sr.Success:
		reason := x402.ReasonFromWire(sr.ErrorReason)
		if reason == x402.ReasonSettlementPending || (reason == x402.ReasonUnexpectedSettle && s.Transaction != "") {
			// Money may have moved: 502 with the transaction hash, so the client can
			// reconcile instead of paying again (docs/facilitator.md#settle-order rule 3). In x402 v1,
			// settlement_pending travels as unexpected_settle_error: with a transaction
			// hash, that too is an outcome not known yet.
			return g.settleUnknown(req, p, s, verdict, "the settlement is pending; reconcile its transaction before paying again")
		}
		if reason == "" {
			reason = x402.ReasonUnexpectedSettle
		}
		return g.rejected(req, p, reason, sr.ErrorMessage, s, verdict)
	case !isTxHash(sr.Transaction):
		g.log.Error("x402 facilitator settled without a transaction hash", zap.String("payer", payer))
		return g.settleUnknown(req, p, s, verdict, "the facilitator reported success without a transaction hash")
	}
	g.log.Info("x402 payment settled", zap.String("payer", payer), zap.String("tx", sr.Transaction),
		zap.String("amount", s.Amount), zap.String("network", s.Network))
	return g.settled(req, p, s, verdict)
}

// settleCall asks the facilitator to settle p for req, bounded by SettleTimeout only, and
// tells OnSettle; it returns the event.
func (g *Gate) settleCall(ctx context.Context, req *x402.Requirements, p *x402.Payment) SettleEvent {
	sctx, cancel := context.WithTimeout(settleContext(ctx), g.settleTimeout)
	defer cancel()
	start := time.Now()
	sr, err := g.f.Settle(sctx, p, req)
	ev := SettleEvent{Requirements: req, Response: sr, Err: err, Duration: time.Since(start)}
	if g.onSettle != nil {
		g.onSettle(ev)
	}
	return ev
}

func isTxHash(s string) bool {
	if len(s) != 66 || s[:2] != "0x" {
		return false
	}
	for i := 2; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
