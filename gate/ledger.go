package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/gate/credit"
	"github.com/x402gate/x402gate/gate/pass"
	"github.com/x402gate/x402gate/gate/payledger"
	"github.com/x402gate/x402gate/x402"
)

// One payment buys one good answer (docs/gate.md#payment-ledger). Every paid request
// begins at the payment's record in the ledger, before anything is verified or
// broadcast, and takes the record's lease, owned by this attempt: a new payment is paid;
// a payment whose earlier attempt died is paid again (the facilitator's journal allows
// no second broadcast) or served the answer it lost; a payment whose upstream failed is
// served again, against its credits, to the holder of its retry token or its payment
// identifier; a pending settlement is redeemed once it is confirmed. A payment answered
// well is refused as a replay, however it is presented.

// Ledger keeps one record per payment (see gate/payledger). The in-process MemoryLedger is
// the default; gate/redisretry shares one among several instances.
type Ledger = payledger.Ledger

// ErrLedgerUnavailable is wrapped by every failure to reach a Ledger. The gate fails
// closed on it: nothing is paid, served or granted.
var ErrLedgerUnavailable = payledger.ErrUnavailable

// MemoryLedger is a Ledger with the in-process pass book of its instance
// (docs/gate.md#sign-in-with-x): NewMemoryLedger's in-process payledger.Memory, or a
// ledger kept elsewhere (the facilitator's journal) beside an in-process pass book. It is
// safe for concurrent use.
type MemoryLedger struct {
	Ledger
	*MemoryPassBook
}

// NewMemoryLedger returns an empty ledger holding at most maxEntries payments (0 means
// payledger.DefaultMemoryEntries). When it is full of live records, a new payment is refused
// (503) rather than a paid-for record forgotten.
func NewMemoryLedger(maxEntries int) *MemoryLedger {
	return &MemoryLedger{Ledger: payledger.NewMemory(maxEntries, nil), MemoryPassBook: NewMemoryPassBook(0)}
}

// payOnce runs one paid request through the ledger: it begins at the payment's record,
// and pays, redeems or serves it again under the lease it took, or refuses it.
func (g *Gate) payOnce(ctx context.Context, in Input, req *x402.Requirements, header string, p *x402.Payment) *Result {
	id, r := g.paymentIDFor(req, p)
	if r != nil {
		return r
	}
	ttl := min(g.remaining(p)+g.route.grace, credit.MaxTTL)
	if req.Matches(p) != nil || ttl < time.Millisecond {
		return g.pay(ctx, in, req, header, p) // refused there, and nothing to remember
	}
	owner, err := credit.NewOwner()
	if err != nil {
		return g.ledgerDown(req, p, err)
	}
	c := payledger.Claim{Key: credit.Key(req, p), Fingerprint: credit.Fingerprint(p, req), Binding: credit.Binding(req.Resource.URL, in.Method, in.RequestURI),
		Owner: owner, Lease: g.lease, TTL: ttl}
	if id != "" {
		c.ID = credit.IDKey(p, id)
	}
	c.Token, _ = credit.TokenHash(in.Header)
	begun := time.Now()
	e, err := g.ledger.Begin(ctx, c)
	if err == nil && e.Status < payledger.New {
		err = fmt.Errorf("begin: no status: %w", ErrLedgerUnavailable)
	}
	if err != nil {
		return g.ledgerDown(req, p, err)
	}
	if e.Status > payledger.Retry {
		return g.refuse(req, p, c, e)
	}
	h := credit.Hold(ctx, g.ledger, c.Key, owner, g.lease, begun, begun.Add(ttl), g.log)
	res := g.attempt(context.WithValue(ctx, holdKey{}, h), in, req, header, p, h, e)
	if res.Kind != KindSettled && res.Kind != KindAuthorized {
		h.Release()
		return res
	}
	res.hold, res.creditTTL = h, g.creditTTL(p)
	if lost := g.leaseLost(ctx, res); lost != nil {
		return lost
	}
	return res
}

// ledgerDown is the 503 of a ledger that cannot be reached.
func (g *Gate) ledgerDown(req *x402.Requirements, p *x402.Payment, err error) *Result {
	g.log.Error("x402 payment ledger unavailable", zap.Error(err))
	return g.errorResult(req, p.Version, http.StatusServiceUnavailable, ReasonRetryStoreUnavailable, "the payment ledger is unavailable")
}

// attempt runs a claim that took the lease.
func (g *Gate) attempt(ctx context.Context, in Input, req *x402.Requirements, header string, p *x402.Payment, h *credit.Lease, e payledger.Entry) *Result {
	switch e.Status {
	case payledger.New, payledger.Resume:
		res := g.pay(ctx, in, req, header, p)
		if e.Status == payledger.Resume && res.Kind == KindRejected && retryable(res.Reason) {
			return g.resumeRun(ctx, in, req, p, h, g.resumeSettled(ctx, req, p, res))
		}
		return g.record(ctx, req, p, h, res)
	case payledger.Redeem:
		return g.redeemPending(ctx, req, p, h, e.Data)
	}
	if e.Status == payledger.Serve && !g.provesPayer(ctx, in, p) {
		g.end(ctx, h, payledger.Release)
		return g.proofRequired(req, p)
	}
	s, ok := g.storedSettlement(e.Data, p)
	if !ok {
		g.end(ctx, h, payledger.Release)
		return g.ledgerDown(req, p, fmt.Errorf("the payment's record holds no settlement"))
	}
	res := g.settled(req, p, s, nil)
	res.Retry, res.resumed = true, e.Status == payledger.Serve // a lost first run is still the first
	if e.Status == payledger.Serve {
		g.log.Info("x402 settled payment whose answer was lost is served", zap.String("payer", s.Payer), zap.String("tx", s.Transaction))
	} else {
		g.log.Info("x402 paid request retried without charge", zap.String("payer", s.Payer), zap.String("tx", s.Transaction))
	}
	return res
}

// resumeRun records res, resumeSettled's answer, on the record h holds. A settlement it
// found confirmed is the answer that was lost: on a route with passes it is served only
// with a proof of the payer, as Serve is; without one the record is kept settled for a
// request that brings it.
func (g *Gate) resumeRun(ctx context.Context, in Input, req *x402.Requirements, p *x402.Payment, h *credit.Lease, res *Result) *Result {
	res = g.record(ctx, req, p, h, res)
	if res.Kind != KindSettled || g.provesPayer(ctx, in, p) {
		return res
	}
	g.end(ctx, h, payledger.Release)
	return g.proofRequired(req, p)
}

// proofRequired is the 402 of a payment whose answer was lost, presented on a route with
// passes without a proof of the payer.
func (g *Gate) proofRequired(req *x402.Requirements, p *x402.Payment) *Result {
	return g.rejected(req, p, x402.ReasonNonceUsed, "this payment was settled and its answer lost; "+
		"send it again with a sign-in-with-x proof of the paying wallet ("+HeaderSignInWithX+")", nil, nil)
}

// record writes the outcome of a payment attempt to the record it holds: settled, or
// pending with a retry token, or forgotten when it was refused before money moved, or
// left reserved for a later attempt when the outcome is unknown; an authorized payment
// keeps its record reserved and its lease.
func (g *Gate) record(ctx context.Context, req *x402.Requirements, p *x402.Payment, h *credit.Lease, res *Result) *Result {
	bg := context.WithoutCancel(ctx)
	switch {
	case res.Kind == KindAuthorized:
		return res // still reserved: settled after a good answer, or forgotten (docs/gate.md#payment-flows)
	case res.Kind == KindSettled:
		return g.recordSettled(bg, h, res)
	case res.Kind == KindRejected || res.Status < 500:
		g.forget(bg, h)
	case res.Settlement != nil:
		return g.pend(bg, req, p, h, res)
	default:
		g.end(bg, h, payledger.Release)
	}
	return res
}

// recordSettled records on the record h holds that res's payment moved. Unless the
// ledger confirms it, the request is not proxied: it is answered with resend, and the
// same request sent again is served once (Serve, or Resume and the facilitator's word).
func (g *Gate) recordSettled(ctx context.Context, h *credit.Lease, res *Result) *Result {
	data, err := json.Marshal(res.Settlement)
	ok := false
	if err == nil {
		ok, err = g.ledger.Settle(ctx, h.Key(), h.Owner(), data)
	}
	if err == nil && ok {
		return res
	}
	if err != nil {
		g.log.Error("x402 payment ledger unavailable", zap.Error(err))
	} else {
		g.log.Error("x402 lease of a payment lapsed before its settlement was recorded")
	}
	g.end(ctx, h, payledger.Release)
	return g.resend(res, "the payment is settled but the payment ledger did not record it")
}

// leaseLost answers res, a settled or authorized result whose upstream has not started,
// with resend (lostUnsettled) when its lease was lost meanwhile (nil when it is still
// held): another attempt may serve the payment now, so this one does not.
func (g *Gate) leaseLost(ctx context.Context, res *Result) *Result {
	if res.hold == nil || !res.hold.Lost() {
		return nil
	}
	g.end(ctx, res.hold, payledger.Release)
	if res.Kind == KindAuthorized {
		return g.lostUnsettled(res)
	}
	return g.resend(res, "the payment is settled but this attempt lost its lease on the payment's record")
}

// resend is the 502 of a settled payment that this attempt may not serve: it carries the
// settlement (PAYMENT-RESPONSE, X-PAYMENT-RESPONSE) and asks the client to send the same
// request again, which the payment ledger then serves once.
func (g *Gate) resend(settled *Result, why string) *Result {
	res := g.errorResult(settled.Requirements, settled.Version, http.StatusBadGateway, ReasonRetryStoreUnavailable,
		why+"; send the same payment header again (with its retry token, if one was given) to be served")
	res.Payer, res.Settlement, res.Verdict = settled.Payer, settled.Settlement, settled.Verdict
	setResponseHeaders(res.Header, settled.Settlement)
	return res
}

// refuse answers a claim that took no lease.
func (g *Gate) refuse(req *x402.Requirements, p *x402.Payment, c payledger.Claim, e payledger.Entry) *Result {
	speaks := c.ID != "" || c.Token != nil // the client names this payment, not a stranger's replay
	switch {
	case e.Status == payledger.Busy && speaks:
		res := g.errorResult(req, p.Version, http.StatusConflict, ReasonRetryInProgress, "this payment is being served; try again when it has answered")
		res.Header.Set("Retry-After", "1")
		return res
	case e.Status == payledger.Busy:
		return g.rejected(req, p, x402.ReasonDuplicateSettlement, "this payment is being settled or served", nil, nil)
	case e.Status == payledger.Conflict && c.ID != "":
		return g.errorResult(req, p.Version, http.StatusConflict, ReasonPaymentIDConflict, "this payment-identifier id names another payment")
	case e.Status == payledger.Conflict:
		return g.rejected(req, p, x402.ReasonDuplicateSettlement, "another payload pays with this nonce", nil, nil)
	case e.Status == payledger.Spent && e.KnownID:
		res := g.errorResult(req, p.Version, http.StatusConflict, ReasonPaymentIDUsed, "this payment was settled and answered; it buys one good answer")
		if s, ok := g.storedSettlement(e.Data, p); ok {
			res.Settlement = s
			setResponseHeaders(res.Header, s)
		}
		return res
	}
	return g.rejected(req, p, x402.ReasonNonceUsed, "this payment was settled already", nil, nil)
}

// end ends the lease h holds with outcome, logging a ledger failure.
func (g *Gate) end(ctx context.Context, h *credit.Lease, outcome int) {
	if err := h.End(ctx, outcome); err != nil {
		g.log.Error("x402 payment ledger unavailable", zap.Error(err))
	}
}

// holdKey is the context key of the lease an attempt runs under (settleContext).
type holdKey struct{}

// settleContext is the context a settle runs under: it is not abandoned when the client
// goes away, but it is cancelled when the lease of the attempt it runs in is lost.
func settleContext(ctx context.Context) context.Context {
	if h, ok := ctx.Value(holdKey{}).(*credit.Lease); ok {
		return h.Context()
	}
	return context.WithoutCancel(ctx)
}

// resumeSettled handles a payment refused as already settled (refused, the rejection)
// when its record was Reserved by an earlier attempt that ended without recording a
// settlement: the instance that ran it died around the broadcast, or its outcome was
// unknown. The facilitator's journal decides (docs/gate.md#payment-ledger): a
// settlement of this exact payment confirmed → the paid result, served now as the answer
// that was lost; still pending → 502; otherwise the rejection stands.
func (g *Gate) resumeSettled(ctx context.Context, req *x402.Requirements, p *x402.Payment, refused *Result) *Result {
	sr, s, err := g.settlementStatus(ctx, req, p)
	reason := x402.ReasonFromWire(sr.ErrorReason)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return refused
	case err != nil:
		return g.statusUnavailable(req, p, s, err, "the settlement's outcome is unknown; retry later with the same payment")
	case sr.Success && isTxHash(s.Transaction):
		return g.confirmedRun(req, p, s, "x402 settlement of an unanswered payment confirmed; paid request proceeds")
	case reason == x402.ReasonSettlementPending:
		return g.settleUnknown(req, p, s, nil, "the settlement is still pending; retry later with the same payment")
	}
	return refused
}

// storedSettlement decodes the settlement kept on a payment's record, in p's version.
func (g *Gate) storedSettlement(data []byte, p *x402.Payment) (*Settlement, bool) {
	var s Settlement
	if err := json.Unmarshal(data, &s); err != nil || !s.Success || !sameAddress(s.Payer, p.Authorization.From) {
		return nil, false
	}
	s.Version = p.Version
	g.rebuildResponseHeader(&s)
	return &s, true
}

// statusUnavailable is the 502 of a settlement whose status the facilitator could not
// report.
func (g *Gate) statusUnavailable(req *x402.Requirements, p *x402.Payment, s *Settlement, err error, msg string) *Result {
	g.log.Warn("x402 settlement status unavailable", zap.String("payer", p.Authorization.From.Hex()), zap.Error(err))
	s.ErrorReason = ""
	return g.settleUnknown(req, p, s, nil, msg)
}

// confirmedRun is the paid result of a payment the facilitator reports settled though it
// was never answered: its first run, served now without a charge.
func (g *Gate) confirmedRun(req *x402.Requirements, p *x402.Payment, s *Settlement, msg string) *Result {
	g.log.Info(msg, zap.String("payer", p.Authorization.From.Hex()), zap.String("tx", s.Transaction))
	res := g.settled(req, p, s, nil)
	res.Retry, res.resumed = true, true
	return res
}

// settlementStatus asks the facilitator for the outcome of p's settlement, even when the
// client has gone away, within SettleTimeout.
func (g *Gate) settlementStatus(ctx context.Context, req *x402.Requirements, p *x402.Payment) (x402.SettleResponse, *Settlement, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.settleTimeout)
	defer cancel()
	sr, err := g.f.SettlementStatus(sctx, p, req)
	return sr, g.settlement(req, p, sr), err
}

// provesPayer reports whether a request that redeems a payment whose answer was lost
// proves it comes from the payer, where the route offers a way to (docs/reliability.md#crash-safety):
// on a route with passes, which offers sign-in-with-x, it must carry a fresh proof signed
// by the payer's wallet, used up here; elsewhere nothing more can be asked.
func (g *Gate) provesPayer(ctx context.Context, in Input, p *x402.Payment) bool {
	if g.pass == nil {
		return true
	}
	vs := in.Header.Values(HeaderSignInWithX)
	s, ok := pass.SiteOf(in.Resource)
	if len(vs) != 1 || !ok {
		return false
	}
	proof, ok := pass.ParseProof(vs[0])
	if !ok {
		return false
	}
	if addr, refused := g.checkSIWX(proof, s); refused != "" || addr != p.Authorization.From {
		return false
	}
	fresh, err := g.passes.UseNonce(ctx, "siwx:"+s.Host+":"+proof.Nonce, pass.NonceTTL)
	if err != nil {
		g.log.Error("x402 pass book unavailable", zap.Error(err))
	}
	return err == nil && fresh
}
