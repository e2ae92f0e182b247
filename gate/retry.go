package gate

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/gate/credit"
	"github.com/x402gate/x402gate/gate/payledger"
	"github.com/x402gate/x402gate/x402"
)

// The payment is settled before the upstream runs (docs/gate.md#settle-before-proxy). When the
// upstream then fails (a status >= 500, a connection failure, a panic), the payer has paid
// for nothing. The gate grants the payment retry credits, bound to a secret retry token
// that only the paying client receives, in the X-PAYMENT-RETRY header of the failed
// answer. The same payment header together with that token, presented again within the
// grace window, reaches the upstream without a second charge, at most RetryConfig.Max
// times. The facilitator proves the header is the settled one (its signature checks out
// and its nonce is used on chain); the token proves the presenter is the client that got
// the failed answer: once settled, the whole signed authorization is public in the
// transaction's calldata, so the payment header alone proves nothing about who sends it.
// The credits live on the payment's record in the Ledger (docs/gate.md#payment-ledger),
// shared through Redis by several instances; the record keeps only the token's SHA-256.

// HeaderPaymentRetry carries the retry token (credit.HeaderPaymentRetry).
const HeaderPaymentRetry = credit.HeaderPaymentRetry

// creditTTL is how long the retry credits of p stay available after a failed first run:
// the route's grace, at most the authorization's remaining validity; zero when none is left.
func (g *Gate) creditTTL(p *x402.Payment) time.Duration {
	ttl := g.remaining(p)
	if g.route.grace > 0 && g.route.grace < ttl {
		ttl = g.route.grace
	}
	if ttl < time.Millisecond {
		return 0
	}
	return min(ttl, credit.MaxTTL)
}

// ReportUpstream tells the gate how the upstream answered a settled request, for callers
// of Handle (Serve calls it itself). failed is true for a status >= 500, a connection
// failure or a panic. It ends the lease the request holds on its payment's record; call it
// after a good answer too (failed false), before the request's context ends: a request
// whose context ends unreported counts as answered well (fail closed). After a first run
// that failed, the payment earns its retry credits, bound to a fresh retry token that
// ReportUpstream returns: send it to the client in the HeaderPaymentRetry header of the
// failed answer, and nowhere else (no log). Only a retry that presents it, or the payment
// identifier the payment was sent under, is let through, one at a time. After a good
// answer the payment is spent, so it buys one good answer. Call it before the failed
// answer reaches the client, so a quick retry finds its credit. It returns "" and does
// nothing for other results and after the first call. When the ledger cannot be reached,
// the lease stays renewed and the end is tried again in the background (no credits
// then: the same header is served again once, as the answer that was lost).
func (g *Gate) ReportUpstream(ctx context.Context, res *Result, failed bool) (retryToken string, err error) {
	if res == nil || res.Kind != KindSettled || res.hold == nil || !res.hold.MarkReported() {
		return "", nil
	}
	h := res.hold
	outcome, credits := payledger.Answer, 0
	var hash []byte
	if failed {
		outcome = payledger.Fail
		if g.route.retryMax > 0 && res.creditTTL > 0 {
			if retryToken, hash, err = credit.NewToken(); err != nil {
				g.log.Error("x402 retry token unavailable", zap.Error(err))
				retryToken = ""
			} else {
				credits = g.route.retryMax
			}
		}
	}
	granted, err := h.Finish(func() (bool, error) {
		return g.ledger.End(ctx, h.Key(), h.Owner(), outcome, hash, credits, res.creditTTL)
	})
	if err != nil {
		g.log.Error("x402 payment ledger unavailable", zap.Error(err))
		later := payledger.Answer
		if failed {
			later = payledger.Release
		}
		go h.EndLater(later, reportTimeout)
		return "", fmt.Errorf("gate: report upstream: %w", err)
	}
	if !granted {
		return "", nil
	}
	g.log.Info("x402 upstream failed after settlement; retry granted", zap.String("payer", res.Payer), zap.Int("retries", g.route.retryMax))
	return retryToken, nil
}

// reportUnanswered ends the lease of res as answered well when the context of a caller
// of Handle ends without a report (fail closed: its upstream may have answered).
func (g *Gate) reportUnanswered(ctx context.Context, res *Result) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	_, _ = g.ReportUpstream(rctx, res, false) // logged there
}
