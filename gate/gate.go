// Package gate is the framework-free x402 resource gate (docs/gate.md#configuration):
// it answers an unpaid request with the route's requirements, and a paid one by decoding
// the payment header, matching it, verifying and settling it through a facilitator,
// before the upstream runs. It also offers a plain net/http middleware (the spec's
// paymentGate) and the browser paywall page. It has no Caddy imports: the Caddy handler
// calls Handle or Serve.
//
// One 402 serves both x402 versions: the v1 JSON body and the v2 PAYMENT-REQUIRED header
// (docs/protocol.md#headers).
package gate

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/gate/credit"
	"github.com/x402gate/x402gate/gate/pass"
	"github.com/x402gate/x402gate/x402"
)

// Facilitator verifies and settles payments (docs/gate.md#facilitator). The in-process
// *facilitator.Service and the remote httpapi client both satisfy it. Logical failures come
// back in the response (IsValid / Success false); an error means the outcome is
// exceptional or unknown.
type Facilitator interface {
	Verify(ctx context.Context, in x402.VerifyInput) (x402.VerifyResponse, error)
	Settle(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error)
	Supported(ctx context.Context) (x402.SupportedResponse, error)
	// SettlementStatus reports the outcome of a settlement the facilitator left unknown,
	// signing nothing new (the bundled one may send again the exact journaled bytes of a
	// settlement another instance journaled and never sent, docs/facilitator.md#takeover):
	// Success true with the transaction hash
	// when it was settled, Success false with settlement_pending while it is still
	// unknown, any other reason when it failed. A facilitator that cannot tell (a remote
	// one: the facilitator API has no such route) returns an error wrapping
	// errors.ErrUnsupported, and the gate then grants no pending credits.
	SettlementStatus(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error)
}

// HeaderVerificationPayment carries the client's EIP-3009 authorization of the
// verification fee, base64 JSON in the same x402 version as the payment header. The 402
// body names it in verification.header.
const HeaderVerificationPayment = "X-VERIFICATION-PAYMENT"

// Input is what one request brings to the gate. The Caddy handler fills it from the
// request and its placeholders; Serve fills Header from the request when it is nil.
type Input struct {
	// Resource is the public, absolute URL of the resource (scheme, host, path), built by
	// the caller from the public URL, honouring only trusted proxies. Required.
	Resource string
	// Price overrides Config.Price for this request, in ParsePrice's grammar. Default: empty.
	Price string
	// PayTo overrides Config.PayTo for this request. Default: empty.
	PayTo string
	// Header is the request's header: PAYMENT-SIGNATURE, X-PAYMENT,
	// X-VERIFICATION-PAYMENT and X-PAYMENT-RETRY are read from it.
	Header http.Header
	// Method and RequestURI (path and query, as the client sent them) bind a retry
	// credit to the request that earned it. Serve fills them from the request when empty.
	Method     string
	RequestURI string
}

// Gate is a resource gate for one route. It is safe for concurrent use.
type Gate struct {
	route          *routeConfig
	reg            *x402.Registry
	f              Facilitator
	pricing        PricingFunc
	ledger         Ledger
	errStatus      func(error) int
	onResult       func(*Result)
	onVerify       func(VerifyEvent)
	onSettle       func(SettleEvent)
	onPass         func(PassEvent)
	log            *zap.Logger
	now            func() time.Time
	verifyTimeout  time.Duration
	settleTimeout  time.Duration
	pricingTimeout time.Duration
	lease          time.Duration // of a payment's record (docs/gate.md#payment-ledger)
	defaultBody    []byte        // v1 error string of an unpaid 402
	pass           *pass.Issuer  // nil: no access passes (docs/gate.md#access-passes)
	passes         PassBook
	challenges     *challengeTemplate // nil: every 402 is built in full
}

// New checks cfg and returns a Gate that verifies and settles through
// opts.Facilitator.
func New(cfg Config, opts Options) (*Gate, error) {
	reg := opts.Registry
	if reg == nil {
		reg = x402.NewRegistry()
	}
	route, err := checkConfig(cfg, reg)
	if err != nil {
		return nil, fmt.Errorf("gate config: %w", err)
	}
	if route.verdict != nil && route.verdict.Fee && opts.Pricing == nil {
		return nil, errors.New("gate config: guardian.fee needs a pricing function (Options.Pricing)")
	}
	f := opts.Facilitator
	if f == nil {
		return nil, errors.New("gate: Options.Facilitator is required")
	}
	g := &Gate{
		route: route, reg: reg, f: f, pricing: opts.Pricing, ledger: opts.Ledger,
		errStatus: opts.ErrorStatus, onResult: opts.OnResult, onVerify: opts.OnVerify, onSettle: opts.OnSettle, onPass: opts.OnPass, log: opts.Logger, now: opts.Now,
		verifyTimeout: cfg.VerifyTimeout, settleTimeout: cfg.SettleTimeout, pricingTimeout: cfg.PricingTimeout,
		lease: cfg.Retry.Lease,
	}
	if g.ledger == nil {
		g.ledger = NewMemoryLedger(0)
	}
	if g.pass, err = pass.NewIssuer(cfg.Pass); err != nil {
		return nil, fmt.Errorf("gate config: %w", err)
	}
	g.passes, _ = g.ledger.(PassBook)
	if g.passes == nil {
		g.passes = NewMemoryPassBook(0)
	}
	if g.errStatus == nil {
		g.errStatus = func(error) int { return http.StatusBadGateway }
	}
	if g.log == nil {
		g.log = zap.NewNop()
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.verifyTimeout <= 0 {
		g.verifyTimeout = DefaultVerifyTimeout
	}
	if g.settleTimeout <= 0 {
		g.settleTimeout = DefaultSettleTimeout
	}
	if g.lease <= 0 {
		g.lease = DefaultRetryLease
	}
	if g.pricingTimeout <= 0 {
		g.pricingTimeout = DefaultPricingTimeout
	}
	g.warnPrices()
	g.challenges = newChallengeTemplate(g)
	return g, nil
}

// Requirements builds the route's payment requirement for one request (docs/gate.md#results
// requirements(ctx)): the configured network, asset and timeout, the resource URL of in,
// and the price and payee of in or else of the Config. An error means the route is
// misconfigured for this request (no price or payee, or a bad override).
func (g *Gate) Requirements(ctx context.Context, in Input) (*x402.Requirements, error) {
	route := g.route
	if err := g.bindFacilitator(ctx); err != nil {
		return nil, err
	}
	if err := checkResourceURL(in.Resource); err != nil {
		return nil, err
	}
	price := route.price
	if in.Price != "" {
		p, err := route.requestPrice(in.Price)
		if err != nil {
			return nil, err
		}
		price = p
	}
	if price == nil {
		return nil, errors.New("gate: no price is configured for this request")
	}
	payTo := route.payTo
	if in.PayTo != "" {
		a, err := route.requestPayTo(in.PayTo)
		if err != nil {
			return nil, err
		}
		payTo = a
	}
	if payTo == ([20]byte{}) {
		return nil, errors.New("gate: no payTo is configured for this request")
	}
	return route.requirement(&route.option, price, payTo, in.Resource), nil
}

// checkResourceURL checks that a resource URL is absolute http(s) with a host, as
// x402-fetch 1.2.0's schema demands of every v1 accepts entry (z.string().url()); a
// relative one would make the client reject the whole 402 answer.
func checkResourceURL(s string) error {
	if s == "" {
		return errors.New("gate: the resource URL is required")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return errors.New("gate: the resource URL must be an absolute http(s) URL without credentials")
	}
	return nil
}

// VerificationRequirements returns the verification-fee requirement for a merchant
// requirement (docs/facilitator.md#verification-fee(merchant)): nil when the guardian is off
// or charges no fee, or when the pricing service says no fee applies. An error means the
// pricing service failed; callers fail closed.
func (g *Gate) VerificationRequirements(ctx context.Context, merchant *x402.Requirements) (*x402.Requirements, error) {
	if g.route.verdict == nil || !g.route.verdict.Fee || merchant == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.pricingTimeout)
	defer cancel()
	fee, err := g.pricing(ctx, merchant)
	if err != nil {
		return nil, fmt.Errorf("gate: verification fee: %w", err)
	}
	if fee == nil {
		return nil, nil
	}
	if fee.Scheme != x402.SchemeExact || fee.Amount == nil || fee.Amount.Sign() <= 0 {
		return nil, errors.New("gate: verification fee: pricing answered an unusable requirement")
	}
	if _, ok := g.reg.Lookup(fee.Network); !ok {
		return nil, fmt.Errorf("gate: verification fee: network %q is not configured", fee.Network)
	}
	return fee, nil
}

// CheckSupported asks the facilitator's /supported whether it settles the route's scheme
// on every network of the route: "exact" in both x402 versions, "upto" in v2 with the
// facilitator's address, as reference servers do at start-up (docs/facilitator.md#api).
func (g *Gate) CheckSupported(ctx context.Context) error {
	s, err := g.f.Supported(ctx)
	if err != nil {
		return fmt.Errorf("gate: facilitator /supported: %w", err)
	}
	if g.route.scheme == SchemeUpto {
		return g.storeFacilitators(s)
	}
	for _, o := range g.route.options {
		n := o.network
		var v1, v2 bool
		for _, k := range s.Kinds {
			if k.Scheme != x402.SchemeExact {
				continue
			}
			v1 = v1 || (k.X402Version == x402.Version1 && k.Network == n.Name)
			v2 = v2 || (k.X402Version == x402.Version2 && k.Network == n.CAIP2)
		}
		if !v1 || !v2 {
			return fmt.Errorf("gate: the facilitator does not settle exact on %s in x402 v1 and v2", n.CAIP2)
		}
	}
	return nil
}

// Handle runs the gate for one request (docs/gate.md#results({xPayment?, ctx})): a resource
// URL whose path an upstream could read as another gives error 400 ambiguous_path
// (docs/gate.md#ambiguous-paths); no payment header gives payment-required; a malformed
// one gives error 400; a payment that does not match the route or that the facilitator
// refuses gives rejected; an unreachable facilitator gives error 502; otherwise the
// payment is settled before the upstream runs (docs/gate.md#settle-before-proxy). Handle
// never panics. After a settled result, call ReportUpstream when the upstream has
// answered, before ctx ends: a settled request whose ctx ends unreported counts as
// answered well (docs/gate.md#payment-ledger). On a route of the authorization flow,
// which settles only after the gate has seen the upstream's answer, Handle answers 500
// invalid_payment_requirements: use Serve or Middleware (docs/gate.md#payment-flows).
func (g *Gate) Handle(ctx context.Context, in Input) *Result {
	if res := g.refuseAmbiguousPath(in.Resource, ""); res != nil {
		return res
	}
	if g.route.authorization {
		g.log.Error("x402 route of the authorization flow called through Handle; use Serve or Middleware")
		return g.errorResult(nil, 0, http.StatusInternalServerError, x402.ReasonInvalidRequirements, "the route's payment flow needs the gate to run its upstream")
	}
	res := g.handle(ctx, in)
	if res.hold != nil {
		context.AfterFunc(ctx, func() { g.reportUnanswered(ctx, res) })
	}
	return res
}

// handle is Handle for Serve, which checks the path and reports every settled result
// itself: the lease stays renewed until then, however the client's request ends.
func (g *Gate) handle(ctx context.Context, in Input) *Result {
	if err := g.bindFacilitator(ctx); err != nil {
		g.log.Warn("x402 facilitator of a metered route unknown", zap.Error(err))
		return g.errorResult(nil, 0, http.StatusBadGateway, ReasonFacilitatorUnavailable, "the facilitator that settles this route's payments could not be asked for its address")
	}
	req, err := g.Requirements(ctx, in)
	if err != nil {
		g.log.Error("x402 route misconfigured", zap.Error(err))
		return g.errorResult(nil, 0, http.StatusInternalServerError, x402.ReasonInvalidRequirements, "the route's payment requirements are misconfigured")
	}
	name, value, err := paymentHeader(in.Header)
	if err != nil {
		return g.errorResult(req, x402.HeaderVersion(name), http.StatusBadRequest, x402.ReasonInvalidPayload, err.Error())
	}
	if name == "" {
		return g.challenge(ctx, req)
	}
	p, err := x402.DecodePaymentHeader(name, value, g.reg)
	if err != nil {
		return g.errorResult(req, x402.HeaderVersion(name), http.StatusBadRequest, x402.ReasonOf(err), err.Error())
	}
	req = choose(g.offersFor(req), p)
	return g.payOnce(ctx, in, req, name, p)
}

// paymentHeader picks the payment header: PAYMENT-SIGNATURE (v2) when present, else
// X-PAYMENT (v1) (docs/protocol.md#headers). A header given twice is ambiguous and
// refused.
func paymentHeader(h http.Header) (name, value string, err error) {
	for _, n := range []string{x402.HeaderPaymentSignature, x402.HeaderPayment} {
		vs := h.Values(n)
		switch len(vs) {
		case 0:
			continue
		case 1:
			return n, vs[0], nil
		}
		return n, "", fmt.Errorf("%s is given %d times", n, len(vs))
	}
	return "", "", nil
}

// pay verifies a decoded payment and settles it; on a route of the authorization flow it
// answers the verified payment authorized instead, for Serve to settle after a good answer
// (docs/gate.md#payment-flows).
func (g *Gate) pay(ctx context.Context, in Input, req *x402.Requirements, header string, p *x402.Payment) *Result {
	res, verdict := g.verify(ctx, in, req, header, p)
	switch {
	case res != nil:
		return res
	case g.route.authorization:
		return g.authorized(req, p, verdict)
	}
	return g.settle(ctx, req, p, verdict)
}

// verify matches and verifies a decoded payment: it returns the result that refuses it,
// or nil and the verdict outcome when the facilitator approved it.
func (g *Gate) verify(ctx context.Context, in Input, req *x402.Requirements, header string, p *x402.Payment) (*Result, *VerdictOutcome) {
	payer := p.Authorization.From.Hex()
	if err := req.Matches(p); err != nil {
		return g.rejected(req, p, x402.ReasonOf(err), err.Error(), nil, nil), nil
	}
	vin := x402.VerifyInput{Payment: p, Requirements: req}
	if r := g.verdictInput(ctx, in, req, header, p, &vin); r != nil {
		return r, nil
	}
	vctx, cancel := context.WithTimeout(ctx, g.verifyTimeout)
	start := time.Now()
	vr, err := g.f.Verify(vctx, vin)
	cancel()
	if g.onVerify != nil {
		g.onVerify(VerifyEvent{Requirements: req, Response: vr, Err: err, Duration: time.Since(start)})
	}
	if err != nil {
		g.log.Warn("x402 verify failed", zap.String("payer", payer), zap.Error(err))
		return g.errorResult(req, p.Version, http.StatusBadGateway, ReasonFacilitatorUnavailable, "the facilitator could not verify the payment"), nil
	}
	verdict := verdictOutcomeOf(vr)
	if !vr.IsValid {
		reason := x402.ReasonFromWire(vr.InvalidReason)
		if reason == "" {
			reason = x402.ReasonUnexpectedVerify
		}
		res := g.rejected(req, p, reason, vr.InvalidMessage, nil, verdict)
		res.Verification = vin.VerificationRequirements
		return res, nil
	}
	if vr.Payer != "" && !sameAddress(vr.Payer, p.Authorization.From) {
		g.log.Error("x402 facilitator reported another payer", zap.String("payer", payer))
		return g.errorResult(req, p.Version, http.StatusBadGateway, ReasonFacilitatorUnavailable, "the facilitator answered for another payer"), nil
	}
	return nil, verdict
}

// verdictInput adds the verification fee to a /verify call according to
// guardian.advertise. It returns a result when the request must stop here.
func (g *Gate) verdictInput(ctx context.Context, in Input, req *x402.Requirements, header string, p *x402.Payment, vin *x402.VerifyInput) *Result {
	gc := g.route.verdict
	if gc == nil || !gc.Fee {
		return nil
	}
	var vp *x402.Payment
	if v := in.Header.Values(HeaderVerificationPayment); len(v) > 0 {
		if len(v) > 1 {
			return g.errorResult(req, p.Version, http.StatusBadRequest, x402.ReasonInvalidPayload, HeaderVerificationPayment+" is given more than once")
		}
		d, err := x402.DecodePaymentHeader(header, v[0], g.reg)
		if err != nil {
			return g.errorResult(req, p.Version, http.StatusBadRequest, x402.ReasonOf(err), HeaderVerificationPayment+": "+err.Error())
		}
		vp = d
	}
	if gc.Advertise == AdvertiseOptional && vp == nil {
		return nil // the client did not opt in to the verdict check
	}
	fee, err := g.VerificationRequirements(ctx, req)
	if err != nil {
		g.log.Warn("x402 verification fee unavailable", zap.Error(err))
		return g.errorResult(req, p.Version, http.StatusBadGateway, ReasonPricingUnavailable, "the verification fee could not be priced")
	}
	if fee != nil {
		vin.VerificationRequirements, vin.VerificationPayment = fee, vp
	}
	return nil
}

func verdictOutcomeOf(vr x402.VerifyResponse) *VerdictOutcome {
	if vr.GuardianStatus == "" && vr.GuardianReason == "" && vr.FeeTxHash == "" && vr.FeeError == "" {
		return nil
	}
	return &VerdictOutcome{Status: vr.GuardianStatus, Reason: vr.GuardianReason, ReasonCode: vr.GuardianReasonCode, Mode: vr.GuardianMode,
		Denials: vr.GuardianDenials, FeeTxHash: vr.FeeTxHash, FeeError: vr.FeeError}
}

// retryable reports whether a refusal can stem from this very payment having been settled
// already: then a retry credit may let it through (see useRetry). A settled payment is
// refused as a used nonce, as a duplicate while its settlement runs, and as expired once
// its validBefore is near or past: the facilitator checks the time window before the
// chain, and after the signature and the match. A retry credit is bound to this exact,
// correctly signed payment and to its secret token, and lives only as long as its grant,
// so the time window does not apply to redeeming it (docs/gate.md#retry-credits).
func retryable(r x402.Reason) bool {
	return r == x402.ReasonNonceUsed || r == x402.ReasonDuplicateSettlement || r == x402.ReasonValidBefore
}

func sameAddress(s string, a [20]byte) bool {
	b, err := parseAddressLoose(s)
	return err == nil && b == a
}

// remaining is how long an authorization stays valid from now; zero when it has expired.
func (g *Gate) remaining(p *x402.Payment) time.Duration {
	vb := p.Authorization.ValidBefore
	if vb == nil || vb.Sign() <= 0 {
		return 0
	}
	if !vb.IsInt64() || vb.Int64() > g.now().Add(credit.MaxTTL).Unix() {
		return credit.MaxTTL
	}
	d := time.Unix(vb.Int64(), 0).Sub(g.now())
	if d < 0 {
		return 0
	}
	return d
}

// bigString renders an amount; nil is "0".
func bigString(n *big.Int) string {
	if n == nil {
		return "0"
	}
	return n.String()
}
