package gate

import (
	"bytes"
	"context"
	"errors"
	"net/http"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/gate/credit"
	"github.com/x402gate/x402gate/x402"
)

// Payment flows of a route (Config.Flow, docs/gate.md#payment-flows).
const (
	// FlowUpfront settles the payment before the upstream runs (the default).
	FlowUpfront = "upfront"
	// FlowAuthorization verifies the payment, runs the upstream with its answer buffered,
	// and settles only after an answer whose status is below 400: the upstream runs before
	// the money moves.
	FlowAuthorization = "authorization"
)

// MaxAuthorizedAnswer bounds the answer the authorization flow buffers until the payment
// is settled: 8 MiB of body. A longer answer is never sent and nothing is settled: 502
// response_too_large, and the authorization stays unspent (docs/gate.md#payment-flows).
const MaxAuthorizedAnswer = 8 << 20

// ReasonResponseTooLarge: in the authorization flow, the upstream's answer was longer than
// MaxAuthorizedAnswer (502); nothing was settled or sent.
const ReasonResponseTooLarge x402.Reason = "response_too_large"

// errAnswerTooLarge is what the upstream's Write gets past MaxAuthorizedAnswer, so a
// proxying upstream stops.
var errAnswerTooLarge = errors.New("x402: the answer is longer than the authorization flow buffers")

// setFlow checks Config.Flow, after setScheme: an upto route settles after its answer
// whatever Flow says. An access pass is bought by a settled payment before its answer, so
// a route with passes settles upfront.
func (route *routeConfig) setFlow(cfg Config) error {
	flow := cfg.Flow
	if route.scheme == SchemeUpto {
		flow = FlowAuthorization
	}
	switch flow {
	case "", FlowUpfront:
	case FlowAuthorization:
		if cfg.Pass.Duration > 0 && route.scheme == SchemeUpto {
			return configErr("pass", "does not combine with scheme %s: a pass is issued with the payment, before its answer reports the cost", SchemeUpto)
		}
		if cfg.Pass.Duration > 0 {
			return configErr("flow", "%s does not combine with pass: a pass is issued with the payment, before its answer", FlowAuthorization)
		}
		route.authorization = true
	default:
		return configErr("flow", "%q is not %s or %s", cfg.Flow, FlowUpfront, FlowAuthorization)
	}
	return nil
}

// authorized is the result of a payment verified on a route of the authorization flow.
func (g *Gate) authorized(req *x402.Requirements, p *x402.Payment, verdict *VerdictOutcome) *Result {
	return &Result{Kind: KindAuthorized, Status: http.StatusOK, Version: p.Version, Payer: p.Authorization.From.Hex(),
		Header: make(http.Header), Requirements: req, Verdict: verdict, payment: p}
}

// lostUnsettled is the 502 of an authorized payment whose attempt lost its lease on the
// payment's record before it settled: nothing moved, and the same payment may be sent again.
func (g *Gate) lostUnsettled(res *Result) *Result {
	return g.errorResult(res.Requirements, res.Version, http.StatusBadGateway, ReasonRetryStoreUnavailable,
		"this attempt lost its lease on the payment's record before it settled; nothing was charged: send the same payment again")
}

// serveAuthorized runs the upstream of res, an authorized payment, with its answer
// buffered, and settles the payment only after a good answer (docs/gate.md#payment-flows):
// a status below 400, with the client still there. Otherwise nothing is settled and the
// payment's record is forgotten, so the same payment can be sent again; an answer of 400
// or more reaches the client as it is. The settlement runs under the lease, not the
// client's context, so a client that leaves once the upstream answered well is charged.
// A settlement that fails answers 402 with the failed settle response (success false),
// and one whose outcome is unknown 502 (docs/gate.md#pending-settlements); neither sends
// the buffered answer.
func (g *Gate) serveAuthorized(w http.ResponseWriter, r *http.Request, res *Result, next NextFunc) error {
	h := res.hold
	stripPaymentHeaders(r.Header)
	stripPass(r.Header)
	ctx, stop := h.Bound(r.Context())
	defer stop()
	ctx = context.WithValue(ctx, paidKey{}, &Paid{Authorized: g.settlement(res.Requirements, res.payment, x402.SettleResponse{}), Verdict: res.Verdict})
	buf := &answerBuffer{header: make(http.Header)}
	done := false
	defer func() {
		if !done {
			g.forget(r.Context(), h) // next panicked: nothing was sent, nothing is settled
		}
	}()
	err := callBuffered(next, buf, r.WithContext(ctx))
	done = true
	var cost costReport
	if g.route.scheme == SchemeUpto {
		cost = takeCost(buf.header) // never passed on, whatever the answer
	}
	if out, good := g.unsettled(r, res, buf, err); !good {
		g.forget(r.Context(), h)
		switch {
		case out != nil:
			out.Write(w, r)
			return nil // answered here, next's error (its write refused) included
		case err == nil && r.Context().Err() == nil:
			buf.release(w, nil) // an answer of 400 or more, as it is: nothing is charged for it
		}
		return err
	}
	sctx := context.WithValue(r.Context(), holdKey{}, h)
	var out *Result
	if g.route.scheme == SchemeUpto {
		out = g.settleMetered(sctx, res, cost)
	} else {
		out = g.record(sctx, res.Requirements, res.payment, h, g.settle(sctx, res.Requirements, res.payment, res.Verdict))
	}
	if g.onResult != nil {
		g.onResult(out)
	}
	if out.Kind != KindSettled {
		out.Write(w, r)
		return nil
	}
	out.hold = h
	buf.release(w, out)
	_ = http.NewResponseController(w).Flush() // answered before recorded as answered, as Serve does
	rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), reportTimeout)
	defer cancel()
	_, _ = g.ReportUpstream(rctx, out, false) // logged there
	return nil
}

// callBuffered runs next into buf. A proxying upstream whose write buf refused as too
// long aborts (Caddy's reverse_proxy panics with http.ErrAbortHandler): nothing reached
// the client yet, so that abort is recovered and answered 502 response_too_large. Any
// other panic goes on.
func callBuffered(next NextFunc, buf *answerBuffer, r *http.Request) error {
	defer func() {
		if buf.overflow {
			if v := recover(); v != nil && v != http.ErrAbortHandler {
				panic(v)
			}
		}
	}()
	return next(buf, r)
}

// unsettled says whether the buffered answer of an authorized payment is a good one to
// settle for; when it is not, out is what the client gets instead (nil: the answer
// itself, of 400 or more, or nothing when next failed or the client left).
func (g *Gate) unsettled(r *http.Request, res *Result, buf *answerBuffer, err error) (out *Result, good bool) {
	switch {
	case buf.overflow:
		return g.errorResult(res.Requirements, res.Version, http.StatusBadGateway, ReasonResponseTooLarge,
			"the upstream's answer is longer than the gate buffers before it settles; nothing was charged"), false
	case err != nil:
		return nil, false
	case res.hold.Lost():
		return g.lostUnsettled(res), false
	case r.Context().Err() != nil:
		return nil, false // the client left before the upstream answered: it is not charged
	case buf.status >= http.StatusBadRequest:
		return nil, false
	}
	return nil, true
}

// forget ends the lease h holds and deletes the payment's record: nothing moved.
func (g *Gate) forget(ctx context.Context, h *credit.Lease) {
	h.Release()
	if _, err := g.ledger.Forget(context.WithoutCancel(ctx), h.Key(), h.Owner()); err != nil {
		g.log.Error("x402 payment ledger unavailable", zap.Error(err))
	}
}

// answerBuffer holds an upstream's answer until the payment is settled. It does not
// flush and cannot be hijacked (a protocol upgrade fails): no byte reaches the client
// before the money moved.
type answerBuffer struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	overflow bool // the upstream wrote more than MaxAuthorizedAnswer
}

// Header is the upstream's response header, held back with its body.
func (b *answerBuffer) Header() http.Header { return b.header }

// WriteHeader records the final status; informational ones are not passed on.
func (b *answerBuffer) WriteHeader(code int) {
	if b.status == 0 && code >= 200 {
		b.status = code
	}
}

// Write buffers body bytes, with an implicit 200 first, up to MaxAuthorizedAnswer.
func (b *answerBuffer) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	if b.overflow || b.body.Len()+len(p) > MaxAuthorizedAnswer {
		b.overflow = true
		return 0, errAnswerTooLarge
	}
	return b.body.Write(p)
}

// Flush does nothing: the answer waits for the settlement.
func (b *answerBuffer) Flush() {}

// release sends the buffered answer on w: its header, then res's when set (the settle
// response header of a settled payment), its status and its body.
func (b *answerBuffer) release(w http.ResponseWriter, res *Result) {
	h := w.Header()
	for k, v := range b.header {
		h[k] = v
	}
	if res != nil {
		res.SetHeaders(h)
	}
	status := b.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(b.body.Bytes())
}
