package gate

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/x402gate/x402gate/gate/credit"
	"github.com/x402gate/x402gate/gate/paywall"
	"github.com/x402gate/x402gate/x402"
)

// Kind is the kind of a GateResult (docs/gate.md#results "GateResult kinds").
type Kind string

// GateResult kinds.
const (
	// KindPaymentRequired: no payment was supplied (402). The body holds accepts and,
	// with guardian advertising, verification.
	KindPaymentRequired Kind = "payment-required"
	// KindRejected: x402 or verdict verification did not approve, or settlement failed
	// logically (402). The merchant was not paid.
	KindRejected Kind = "rejected"
	// KindSettled: the merchant was paid (200); the upstream may run.
	KindSettled Kind = "settled"
	// KindAuthorized: the payment was verified, not settled (200), on a route of the
	// authorization flow: Serve runs the upstream and settles only after a good answer
	// (docs/gate.md#payment-flows).
	KindAuthorized Kind = "authorized"
	// KindError: the header was malformed (400), a dependency failed (502, 503), or the
	// route is misconfigured (500).
	KindError Kind = "error"
)

// Reasons the gate adds to x402's for failures of its own dependencies.
const (
	// ReasonPricingUnavailable: the verification fee could not be priced.
	ReasonPricingUnavailable x402.Reason = "pricing_unavailable"
	// ReasonRetryStoreUnavailable: the retry store could not be read; the request is not
	// proxied (fail closed).
	ReasonRetryStoreUnavailable x402.Reason = "retry_store_unavailable"
	// ReasonRetryInProgress: another retry of the same payment holds its credit; the
	// request is not proxied (409, Retry-After).
	ReasonRetryInProgress x402.Reason = "retry_in_progress"
	// ReasonFacilitatorUnavailable: the facilitator could not be reached or answered
	// something no facilitator produces.
	ReasonFacilitatorUnavailable x402.Reason = "facilitator_unavailable"
)

// Result is a GateResult: what the gate decided for one request and everything needed to
// answer it. Write sends it; for KindSettled the caller sets Header and runs the upstream.
type Result struct {
	// Kind is the decision.
	Kind Kind
	// Status is the HTTP status to answer with: 402, 200, 400, 500, 502 or 503.
	Status int
	// Reason is the machine-readable cause of a rejected or error result, in x402's
	// internal (v2) form; empty otherwise. Reason.For(Version) is the wire string.
	Reason x402.Reason
	// Message is a human-readable detail that quotes no request bytes; it may be empty.
	Message string
	// Version is the x402 version of the payment header, 0 when none was decoded.
	Version int
	// Payer is the payment's signer (authorization.from), when a payment was decoded.
	Payer string
	// Header holds the response headers the gate sets: PAYMENT-REQUIRED, Cache-Control and
	// Access-Control-Expose-Headers on a 402, X-PAYMENT-RESPONSE / PAYMENT-RESPONSE on
	// success and after a settlement attempt.
	Header http.Header
	// Body is the JSON body of every kind except KindSettled (nil).
	Body []byte
	// Requirements is the route's requirement for this request; nil when it could not be
	// built.
	Requirements *x402.Requirements
	// Verification is the verification-fee requirement advertised or sent with /verify;
	// nil when no fee applies.
	Verification *x402.Requirements
	// Settlement is the merchant settlement of a KindSettled result, and the failed or
	// pending attempt of a rejected or 502 result when the facilitator reported one.
	Settlement *Settlement
	// Verdict is the verdict outcome reported by /verify, when it consulted the verdict
	// service.
	Verdict *VerdictOutcome
	// Retry is true when a KindSettled result was granted by an earlier failed upstream
	// call of the same payment: nothing was charged this time.
	Retry bool

	challenge *x402.PaymentRequiredV2 // for the paywall page
	display   display
	displays  []display        // one per accepts entry, for the paywall's choice
	resumed   bool             // a Retry that is the payment's first run (its answer was lost or pending)
	payment   *x402.Payment    // the verified payment of a KindAuthorized result, settled after its answer
	cached    *challengeAnswer // the answer of a cached challenge (cachedChallenge)
	// hold is the lease a settled request holds on its payment's record;
	// ReportUpstream ends it.
	hold      *credit.Lease
	creditTTL time.Duration // how long retry credits last after a failed first run
}

// display is what the paywall shows beside the requirement.
type display struct {
	price   string
	symbol  string
	network string // v1 name, for people
	pass    string // what a payment buys with passes on: "24 hours of /premium/"
}

// paywallPage is the paywall page of a payment-required result.
func (r *Result) paywallPage() paywall.Page {
	displays := r.displays
	if len(displays) == 0 {
		displays = []display{r.display}
	}
	ways := make([]paywall.Way, len(displays))
	for i, d := range displays {
		ways[i] = paywall.Way{Price: d.price, Symbol: d.symbol, Network: d.network}
	}
	return paywall.Page{Requirement: r.Requirements, Challenge: r.challenge, Ways: ways, Pass: r.display.pass, Words: paywallWords}
}

// Settlement is the settlement data of a paid request: the values of the Caddy
// placeholders {http.x402.payer}, {http.x402.tx}, {http.x402.amount} and
// {http.x402.network}.
type Settlement struct {
	// Success is the facilitator's success flag.
	Success bool `json:"success"`
	// Payer is the checksummed address that paid.
	Payer string `json:"payer"`
	// Transaction is the settlement's transaction hash, 0x-hex; empty when none was sent.
	Transaction string `json:"transaction"`
	// Amount is the amount paid, in the asset's base units.
	Amount string `json:"amount"`
	// Network is the CAIP-2 network id ("eip155:84532").
	Network string `json:"network"`
	// NetworkName is the v1 network name ("base-sepolia").
	NetworkName string `json:"networkName"`
	// Asset is the checksummed token address.
	Asset string `json:"asset"`
	// PayTo is the checksummed merchant address.
	PayTo string `json:"payTo"`
	// Version is the x402 version of the payment.
	Version int `json:"version"`
	// ErrorReason is the facilitator's errorReason of a failed or pending settlement.
	ErrorReason string `json:"errorReason,omitempty"`
	// ResponseHeader is the base64 value sent as X-PAYMENT-RESPONSE (and, for v2, as
	// PAYMENT-RESPONSE).
	ResponseHeader string `json:"-"`
}

// VerdictOutcome is the verdict-service outcome reported by /verify (docs/facilitator.md#verify body).
type VerdictOutcome struct {
	Status string `json:"status,omitempty"`
	Reason string `json:"reason,omitempty"`
	// ReasonCode is the verdict's reasonCode, e.g. recipient_not_allowed.
	ReasonCode string `json:"reasonCode,omitempty"`
	// Mode is the mode of the policy that judged the payment (docs/verdict-api.md#modes).
	Mode string `json:"mode,omitempty"`
	// Denials are the failed checks of a refusal, with the observed and expected values and
	// the suggested corrections (docs/verdict-api.md#observations).
	Denials   []x402.GuardianDenial `json:"denials,omitempty"`
	FeeTxHash string                `json:"feeTxHash,omitempty"`
	FeeError  string                `json:"feeError,omitempty"`
}

// exposeHeaders lets browser clients on another origin read the x402 headers
// (docs/protocol.md#headers).
const exposeHeaders = "PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-PAYMENT-RESPONSE, X-PAYMENT-RETRY"

// challengeBody is the JSON body of a 402: the v1 PaymentRequired (docs/gate.md#results: "Body holds
// accepts and optional verification"), readable by x402-fetch 1.2.0.
type challengeBody struct {
	X402Version  int                   `json:"x402Version"`
	Error        string                `json:"error"`
	Accepts      []x402.RequirementsV1 `json:"accepts"`
	Payer        string                `json:"payer,omitempty"`
	Verification *verificationBody     `json:"verification,omitempty"`
	// Verdict carries the verdict of a payment the verdict check refused (its status and
	// reason), so the payer's agent learns why without asking the facilitator.
	Verdict *VerdictOutcome `json:"guardian,omitempty"`
}

// verificationBody advertises the verdict check (guardian.advertise): its mode, the fee
// requirement (null when no fee applies) and the header that carries the fee payment.
type verificationBody struct {
	Mode         string               `json:"mode"`
	Requirements *x402.RequirementsV1 `json:"requirements"`
	Header       string               `json:"header"`
}

// errorBody is the JSON body of an error result.
type errorBody struct {
	X402Version int                   `json:"x402Version"`
	Error       string                `json:"error"`
	Message     string                `json:"message,omitempty"`
	Accepts     []x402.RequirementsV1 `json:"accepts,omitempty"`
}

// Write sends r. A payment-required result goes to a browser (IsBrowser) as the HTML
// paywall page, still with status 402 and the PAYMENT-REQUIRED header; every other
// non-settled result is JSON. For KindSettled and KindAuthorized, Write only sets Header:
// the upstream writes the status and body.
func (r *Result) Write(w http.ResponseWriter, req *http.Request) {
	h := w.Header()
	r.SetHeaders(h)
	if r.Kind == KindSettled || r.Kind == KindAuthorized {
		return
	}
	if r.Kind == KindPaymentRequired && req != nil && IsBrowser(req.Header) && r.challenge != nil {
		if page, csp, err := paywall.Render(r.paywallPage()); err == nil {
			h.Set("Content-Type", "text/html; charset=utf-8")
			h.Set("Content-Length", strconv.Itoa(len(page)))
			paywall.SetHeaders(h, csp)
			w.WriteHeader(r.Status)
			if req.Method != http.MethodHead {
				_, _ = w.Write(page)
			}
			return
		}
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(r.Body)))
	w.WriteHeader(r.Status)
	if req == nil || req.Method != http.MethodHead {
		_, _ = w.Write(r.Body)
	}
}

// SetHeaders copies r.Header into h, replacing values of the same names.
func (r *Result) SetHeaders(h http.Header) {
	for k, v := range r.Header {
		h[k] = append([]string(nil), v...)
	}
}

// IsBrowser reports whether a request comes from a web browser that should get the
// paywall page: Accept contains text/html and User-Agent contains Mozilla, the test every
// reference x402 server uses (docs/gate.md#paywall).
func IsBrowser(h http.Header) bool {
	return strings.Contains(strings.Join(h.Values("Accept"), ","), "text/html") &&
		strings.Contains(h.Get("User-Agent"), "Mozilla")
}
