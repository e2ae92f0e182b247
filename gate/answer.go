package gate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/x402"
)

// The error strings of an unpaid 402, as the reference servers write them
// (docs/gate.md#results).
const (
	unpaidErrorV1 = "X-PAYMENT header is required"
	unpaidErrorV2 = "Payment required"
)

// challenge builds the payment-required result: the v1 JSON body and the v2
// PAYMENT-REQUIRED header on one 402 (docs/protocol.md#headers step 1), and with guardian
// advertising the verification section (docs/gate.md#results: "Body holds accepts and optional
// verification").
func (g *Gate) challenge(ctx context.Context, req *x402.Requirements) *Result {
	var vb *verificationBody
	var fee *x402.Requirements
	if gc := g.route.verdict; gc != nil && gc.Advertise != "" {
		f, err := g.VerificationRequirements(ctx, req)
		if err != nil {
			g.log.Warn("x402 verification fee unavailable", zap.Error(err))
			if gc.Advertise == AdvertiseRequired {
				return g.errorResult(req, 0, http.StatusBadGateway, ReasonPricingUnavailable, "the verification fee could not be priced")
			}
			f = nil // optional: the route still sells without the verdict check
		}
		vb = &verificationBody{Mode: gc.Advertise, Header: HeaderVerificationPayment}
		if f != nil {
			v1, err := f.V1(g.reg)
			if err != nil {
				g.log.Error("x402 verification fee has no v1 form", zap.Error(err))
				return g.errorResult(req, 0, http.StatusBadGateway, ReasonPricingUnavailable, "the verification fee could not be priced")
			}
			vb.Requirements, fee = &v1, f
		}
	}
	res := g.answer402(req, "", unpaidErrorV1, unpaidErrorV2, vb, nil)
	if res.Kind == KindError {
		return res
	}
	res.Kind, res.Verification = KindPaymentRequired, fee
	return res
}

// paysV1 reports whether an x402 v1 client can pay r: exact over EIP-3009 only, since
// Permit2 and upto are x402 v2 only (a v1 X-PAYMENT carries no Permit2 payload). The v1
// body of a 402 lists only these; the v2 header lists every way (docs/gate.md#permit2).
func paysV1(r *x402.Requirements) bool {
	return r.Scheme == x402.SchemeExact && r.Transfer() == x402.TransferEIP3009
}

// answer402 builds a 402 for req: the body's error is errV1 (the reason in the payment's
// version for a rejection), the header's is errV2; verdict, when set, is the verdict outcome.
func (g *Gate) answer402(req *x402.Requirements, payer, errV1, errV2 string, vb *verificationBody, verdict *VerdictOutcome) *Result {
	offers := g.offersFor(g.firstOffer(req))
	accepts := make([]x402.RequirementsV1, 0, len(offers))
	acceptsV2 := make([]x402.RequirementsV2, 0, len(offers))
	displays := make([]display, 0, len(offers))
	for _, o := range offers {
		if paysV1(o) {
			v1, err := o.V1(g.reg)
			if err != nil {
				g.log.Error("x402 requirement has no v1 form", zap.Error(err))
				return g.errorResult(nil, 0, http.StatusInternalServerError, x402.ReasonInvalidRequirements, "the route's network has no x402 v1 name")
			}
			accepts = append(accepts, v1)
		}
		acceptsV2, displays = append(acceptsV2, o.V2()), append(displays, g.displayOf(o))
	}
	body := mustJSON(challengeBody{X402Version: x402.Version1, Error: errV1, Accepts: accepts, Payer: payer, Verification: vb, Verdict: verdict})
	res := req.Resource
	pr := &x402.PaymentRequiredV2{
		X402Version: x402.Version2,
		Error:       errV2,
		Resource:    &res,
		Accepts:     acceptsV2,
		Extensions:  g.route.extensions,
	}
	hv, err := x402.EncodePaymentRequired(pr)
	if err != nil {
		g.log.Error("x402 PAYMENT-REQUIRED too large", zap.Error(err))
		return g.errorResult(nil, 0, http.StatusInternalServerError, x402.ReasonInvalidRequirements, "the route's payment requirements do not fit a header")
	}
	h := make(http.Header, 4)
	h.Set(x402.HeaderPaymentRequired, hv)
	h.Set("Cache-Control", "no-store")
	h.Set("Access-Control-Expose-Headers", exposeHeaders)
	return &Result{
		Status:       http.StatusPaymentRequired,
		Header:       h,
		Body:         body,
		Requirements: req,
		challenge:    pr,
		display:      displays[0],
		displays:     displays,
	}
}

// rejected builds a rejected result: a 402 (412 for a payer without a Permit2 allowance)
// whose body error is the reason in the payment's version and whose PAYMENT-REQUIRED
// header carries the v2 reason; after a settlement attempt it also carries the failed
// settle response, and after a verdict that did not approve, the verdict's status and
// reason (guardian).
func (g *Gate) rejected(req *x402.Requirements, p *x402.Payment, reason x402.Reason, msg string, s *Settlement, verdict *VerdictOutcome) *Result {
	payer := p.Authorization.From.Hex()
	var shown *VerdictOutcome
	if verdict != nil && ((verdict.Status != "" && verdict.Status != "approved") || verdict.FeeError != "") {
		shown = verdict
	}
	res := g.answer402(req, payer, reason.For(p.Version), reason.V2(), nil, shown)
	if res.Kind == KindError {
		return res
	}
	res.Kind, res.Reason, res.Message, res.Version, res.Payer = KindRejected, reason, msg, p.Version, payer
	res.Verdict = verdict
	if reason == x402.ReasonPermit2AllowanceRequired {
		// The payer must approve Permit2 once before any payment can work: 412, as the
		// reference servers answer it (docs/gate.md#permit2).
		res.Status = http.StatusPreconditionFailed
	}
	if s != nil {
		res.Settlement = s
		setResponseHeaders(res.Header, s)
	}
	g.log.Info("x402 payment rejected", zap.String("payer", payer), zap.String("reason", string(reason)))
	return res
}

// settleUnknown answers 502 when the settlement's outcome is not known (the facilitator
// failed, or the transaction is pending). A known transaction hash travels in the response
// header with success false, so the client can reconcile.
func (g *Gate) settleUnknown(req *x402.Requirements, p *x402.Payment, s *Settlement, verdict *VerdictOutcome, msg string) *Result {
	reason := x402.ReasonFromWire(s.ErrorReason)
	if reason == "" || reason == x402.ReasonUnexpectedSettle {
		reason = x402.ReasonUnexpectedSettle
		if s.Transaction != "" {
			reason = x402.ReasonSettlementPending
		}
	}
	s.Success, s.ErrorReason = false, reason.For(p.Version)
	res := g.errorResult(req, p.Version, http.StatusBadGateway, reason, msg)
	res.Payer, res.Settlement, res.Verdict = p.Authorization.From.Hex(), s, verdict
	g.rebuildResponseHeader(s)
	setResponseHeaders(res.Header, s)
	return res
}

// errorResult builds an error result. The body carries the reason in the payment's
// version (v1 enum for v1 and unknown versions, which every x402 client can read), a
// message, and the requirements when they are known.
func (g *Gate) errorResult(req *x402.Requirements, version int, status int, reason x402.Reason, msg string) *Result {
	v := version
	if v == 0 {
		v = x402.Version1
	}
	body := errorBody{X402Version: x402.Version1, Error: wireReason(reason, v), Message: msg}
	if req != nil && status == http.StatusBadRequest {
		for _, o := range g.offersFor(g.firstOffer(req)) {
			if v1, err := o.V1(g.reg); err == nil {
				body.Accepts = append(body.Accepts, v1)
			}
		}
	}
	h := make(http.Header, 2)
	h.Set("Cache-Control", "no-store")
	h.Set("Access-Control-Expose-Headers", exposeHeaders)
	return &Result{
		Kind: KindError, Status: status, Reason: reason, Message: msg, Version: version,
		Header: h, Body: mustJSON(body), Requirements: req,
	}
}

// wireReason is the body's error string for reason in version v: the x402 reason in the
// version's form, or the gate's own dependency reasons (pricing, retry store, facilitator)
// as they are, since no x402 enum names them and clients do not schema-check a 502 or 503.
func wireReason(reason x402.Reason, v int) string {
	switch reason {
	case ReasonPricingUnavailable, ReasonRetryStoreUnavailable, ReasonRetryInProgress, ReasonFacilitatorUnavailable,
		ReasonPaymentIDRequired, ReasonPaymentIDConflict, ReasonPaymentIDUsed, ReasonAmbiguousPath, ReasonResponseTooLarge,
		ReasonCostAboveMaximum, ReasonInvalidCost:
		return string(reason)
	}
	return reason.For(v)
}

// settlement turns a settle response into Settlement data, with the network in both forms
// and the response header in the payment's version.
func (g *Gate) settlement(req *x402.Requirements, p *x402.Payment, sr x402.SettleResponse) *Settlement {
	s := &Settlement{
		Success:     sr.Success,
		Payer:       p.Authorization.From.Hex(),
		Transaction: sr.Transaction,
		Amount:      bigString(req.Amount),
		Network:     req.Network,
		NetworkName: g.route.optionOf(req).network.Name,
		Asset:       req.Asset.Hex(),
		PayTo:       req.PayTo.Hex(),
		Version:     p.Version,
		ErrorReason: sr.ErrorReason,
	}
	if s.Transaction == "" && isTxHash(sr.TxHash) {
		s.Transaction = sr.TxHash
	}
	if s.Transaction != "" && !isTxHash(s.Transaction) {
		s.Transaction = "" // never echo a malformed value into a header
	}
	g.rebuildResponseHeader(s)
	return s
}

// rebuildResponseHeader encodes the settle response header of s: the fields every client
// reads, with the network in the payment's version format (docs/protocol.md#headers step 4).
func (g *Gate) rebuildResponseHeader(s *Settlement) {
	network := s.Network
	if s.Version == x402.Version1 {
		network = s.NetworkName
	}
	sr := &x402.SettleResponse{
		Success:     s.Success,
		Payer:       s.Payer,
		Transaction: s.Transaction,
		Network:     network,
	}
	if s.Success && s.Version == x402.Version2 {
		sr.Amount = s.Amount
	}
	if !s.Success {
		sr.ErrorReason = s.ErrorReason
	}
	hv, err := x402.EncodeSettleResponse(sr)
	if err != nil {
		hv = "" // a settle response is small; unreachable
	}
	s.ResponseHeader = hv
}

// setResponseHeaders sets the settle response header: X-PAYMENT-RESPONSE for every
// request (docs/gate.md#results) and PAYMENT-RESPONSE too for v2, which v2 clients read
// first. Both carry the same value.
func setResponseHeaders(h http.Header, s *Settlement) {
	if s.ResponseHeader == "" {
		return
	}
	h.Set(x402.HeaderPaymentResponse, s.ResponseHeader)
	if s.Version == x402.Version2 {
		h.Set(x402.HeaderPaymentResponseV2, s.ResponseHeader)
	}
	h.Set("Access-Control-Expose-Headers", exposeHeaders)
}

// settled builds a settled result.
func (g *Gate) settled(req *x402.Requirements, p *x402.Payment, s *Settlement, verdict *VerdictOutcome) *Result {
	h := make(http.Header, 3)
	setResponseHeaders(h, s)
	return &Result{
		Kind: KindSettled, Status: http.StatusOK, Version: p.Version, Payer: s.Payer,
		Header: h, Requirements: req, Settlement: s, Verdict: verdict,
	}
}

var errNotAddress = errors.New("not a 0x-hex address")

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Every body is built from strings and checked requirements; unreachable.
		return []byte(`{"x402Version":1,"error":"unexpected_verify_error"}`)
	}
	return b
}

// parseAddressLoose reads a 0x-hex address in any case, as facilitators write them.
func parseAddressLoose(s string) (common.Address, error) {
	if !strings.HasPrefix(s, "0x") || !common.IsHexAddress(s) {
		return common.Address{}, errNotAddress
	}
	return common.HexToAddress(s), nil
}
