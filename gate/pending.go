package gate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/x402"
)

// When the outcome of a settlement is unknown at answer time (the facilitator answers
// settlement_pending, or the settle call failed after a broadcast), the gate answers 502,
// but the transfer may still be mined: re-sending the same payment header would then be
// refused (nonce already used) and the payer would have paid for nothing. So, when the
// facilitator can report a settlement's outcome later (Facilitator.SettlementStatus) and a RetryStore
// is configured, the 502 carries a fresh retry token (X-PAYMENT-RETRY) bound to one
// "pending" credit of the payment. The same payment header with that token is let through
// once the facilitator reports the settlement confirmed; while it is still pending it gets
// 502 again and keeps its credit; when the settlement failed (reverted, dropped, or the
// payer cancelled the authorization) it gets 402 and the credit is revoked.

// canReportStatus asks the facilitator for the settlement's status once, and reports
// whether it can answer such a question at all: a pending credit is worth granting only
// when its redemption can learn the outcome.
func (g *Gate) canReportStatus(ctx context.Context, req *x402.Requirements, p *x402.Payment) bool {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.settleTimeout)
	defer cancel()
	_, err := g.f.SettlementStatus(sctx, p, req)
	return !errors.Is(err, errors.ErrUnsupported)
}

// creditPending marks the credit of a settlement whose outcome was unknown.
const creditPending = "pending"

// pendingCredit is the data of a pending credit.
type pendingCredit struct {
	Kind       string     `json:"kind"`
	Settlement Settlement `json:"settlement"`
}

// pendingKey identifies the pending credit of one payment of one resource; it differs
// from retryKey, so a pending credit and the upstream-failure credits it may lead to
// never share a grant.
func pendingKey(in Input, req *x402.Requirements, p *x402.Payment) string {
	sum := sha256.Sum256([]byte("pending\n" + retryKey(in, req, p)))
	return "retry-pending:" + hex.EncodeToString(sum[:])
}

// grantPending gives res, the 502 of a settlement whose outcome is unknown, a pending
// credit and its retry token, when the facilitator can check the settlement later and a
// RetryStore is configured. It returns res.
func (g *Gate) grantPending(ctx context.Context, in Input, req *x402.Requirements, p *x402.Payment, res *Result) *Result {
	if g.retries == nil || res.Settlement == nil || !g.canReportStatus(ctx, req, p) {
		return res
	}
	ttl := g.remaining(p) + g.route.grace
	if ttl > maxRetryTTL {
		ttl = maxRetryTTL
	}
	if ttl < time.Millisecond {
		return res
	}
	data, err := json.Marshal(pendingCredit{Kind: creditPending, Settlement: *res.Settlement})
	if err != nil {
		return res
	}
	token, hash, err := newRetryToken()
	if err != nil {
		g.log.Error("x402 retry token unavailable", zap.Error(err))
		return res
	}
	granted, err := g.retries.Grant(context.WithoutCancel(ctx), pendingKey(in, req, p), hash, 1, ttl, data)
	if err != nil {
		g.log.Error("x402 retry store unavailable", zap.Error(err))
		return res
	}
	if granted {
		res.Header.Set(HeaderPaymentRetry, token)
		g.log.Info("x402 settlement outcome unknown; pending retry granted", zap.String("payer", res.Payer))
	}
	return res
}

// usePending handles a request that presents the retry token of a pending credit: it asks
// the facilitator for the settlement's outcome and lets the request through only when it
// is confirmed (taking the credit), answers 502 while it is pending (keeping it), and 402
// when it failed (revoking it). It returns nil when there is no pending credit for this
// payment and token.
func (g *Gate) usePending(ctx context.Context, in Input, req *x402.Requirements, p *x402.Payment, hash []byte) *Result {
	if g.retries == nil {
		return nil
	}
	key := pendingKey(in, req, p)
	data, ok, err := g.retries.Peek(ctx, key, hash)
	if err != nil {
		g.log.Error("x402 retry store unavailable", zap.Error(err))
		return g.errorResult(req, p.Version, http.StatusServiceUnavailable, ReasonRetryStoreUnavailable, "the retry store is unavailable")
	}
	if !ok {
		return nil
	}
	var c pendingCredit
	if err := json.Unmarshal(data, &c); err != nil || c.Kind != creditPending || !sameAddress(c.Settlement.Payer, p.Authorization.From) {
		g.log.Error("x402 pending credit holds no settlement")
		return g.errorResult(req, p.Version, http.StatusServiceUnavailable, ReasonRetryStoreUnavailable, "the retry store is unavailable")
	}
	payer := p.Authorization.From.Hex()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.settleTimeout)
	sr, err := g.f.SettlementStatus(sctx, p, req)
	cancel()
	s := g.settlement(req, p, sr)
	if s.Transaction == "" {
		s.Transaction = c.Settlement.Transaction
	}
	reason := x402.ReasonFromWire(sr.ErrorReason)
	switch {
	case err != nil:
		g.log.Warn("x402 settlement status unavailable", zap.String("payer", payer), zap.Error(err))
		s.ErrorReason = ""
		return g.settleUnknown(req, p, s, nil, "the settlement's outcome is still unknown; retry later with the same retry token")
	case sr.Success && isTxHash(s.Transaction):
		if data, r := g.acquire(ctx, key, hash, req, p); data == nil {
			return r // nil: another request took the credit first
		}
		g.log.Info("x402 pending settlement confirmed; paid request proceeds", zap.String("payer", payer), zap.String("tx", s.Transaction))
		res := g.settled(req, p, s, nil)
		res.Retry, res.resumed = true, true
		g.armRetry(res, in, req, p)
		return res
	case sr.Success, reason == x402.ReasonSettlementPending, reason == x402.ReasonUnexpectedSettle, reason == "":
		// Still unknown (v1 writes settlement_pending as unexpected_settle_error).
		s.ErrorReason = x402.ReasonSettlementPending.V2()
		return g.settleUnknown(req, p, s, nil, "the settlement is still pending; retry later with the same retry token")
	}
	if err := g.retries.Revoke(ctx, key); err != nil {
		g.log.Error("x402 retry store unavailable", zap.Error(err))
	}
	s.Success = false
	g.rebuildResponseHeader(s)
	return g.rejected(req, p, reason, sr.ErrorMessage, s, nil)
}
