// Package httpapi is the facilitator's HTTP API (docs/facilitator.md#api): NewHandler
// serves a facilitator engine as POST /verify, /settle, /verification/quote and GET
// /supported, /health, and Client is the remote facilitator that calls such a server.
// It sits beside the engine, not in it: it imports package facilitator, never the other
// way round.
package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/internal/jsonhttp"
	"github.com/x402gate/x402gate/x402"
)

// Defaults of HandlerOptions.
const (
	// DefaultMaxBodyBytes caps a request body of the facilitator API.
	DefaultMaxBodyBytes = 64 << 10
	// DefaultPricingTimeout bounds one call to the pricing service
	// (docs/facilitator.md#verification-fee).
	DefaultPricingTimeout = 5 * time.Second
)

// HeaderFacilitatorKey is the request header that carries FACILITATOR_API_KEY
// (docs/facilitator.md#api).
const HeaderFacilitatorKey = "x-facilitator-key"

// HandlerOptions configure NewHandler. The zero value serves an open API (no key), as a
// facilitator without FACILITATOR_API_KEY does (docs/facilitator.md#api).
type HandlerOptions struct {
	// APIKey is FACILITATOR_API_KEY. When set, every route except GET /health requires
	// the x-facilitator-key header with exactly this value, compared in constant time; a
	// missing or wrong key gets 401 {"error":"unauthorized"}. Default: empty, open.
	APIKey string
	// PathPrefix is removed from the request path before routing, so the API can be
	// mounted under a sub-path without http.StripPrefix (e.g. "/facilitator" serves
	// "/facilitator/verify"). A request outside the prefix gets 404. Default: empty, the
	// routes sit at the root.
	PathPrefix string
	// MaxBodyBytes caps a request body; a larger one gets 413. Default: DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Registry resolves the networks a payment may name; it must be the engine's, so a
	// locally configured chain decodes. Default: nil, the built-in networks.
	Registry *x402.Registry
	// PricingURL is the pricing service that POST /verification/quote passes through to.
	// Default: empty; the endpoint then answers {"requirements": null}.
	PricingURL string
	// PricingTimeout bounds one pricing call. Default: DefaultPricingTimeout.
	PricingTimeout time.Duration
	// HealthDetailed turns on detailed GET /health, which is off unless explicitly enabled
	// (docs/facilitator.md#api).
	// Default: false, {"status":"ok"} with no RPC read.
	HealthDetailed bool
	// HealthInfo supplies the detailed health fields, from cached balances. It is called
	// only when HealthDetailed is true. Default: nil (detailed health then shows status only).
	HealthInfo func(ctx context.Context) (HealthDetails, error)
	// Logger receives request failures. It never receives a key or a payment signature.
	// Default: zap.NewNop().
	Logger *zap.Logger
}

// Error codes of the API's own (non-x402) JSON error bodies: {"error", "reason", "message"}.
const (
	errCodeUnauthorized  = "unauthorized"
	errCodeInvalid       = "invalid_request"
	errCodeTooLarge      = "request_too_large"
	errCodeMediaType     = "unsupported_media_type"
	errCodeNotFound      = "not_found"
	errCodeMethod        = "method_not_allowed"
	errCodePricing       = "pricing_unavailable"
	reasonMalformedJSON  = "malformed_json"
	reasonMissingPayload = "missing_payment_payload"
	reasonMissingReqs    = "missing_payment_requirements"
	reasonMissingRes     = "missing_resource"
	reasonBodyTooLarge   = "body_too_large"
	reasonNotJSON        = "content_type_not_json"
)

// apiError is the JSON body of every answer that is not an x402 verify/settle result.
type apiError struct {
	Error   string `json:"error"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Backend is what NewHandler serves: the engine's verify, settle and supported. Logical
// failures come back in the response (IsValid / Success false, with a reason in the
// payment's x402 version); an error is an exceptional failure, HTTP 500 on the wire
// (docs/facilitator.md#api).
//
// It is the part of gate.Facilitator that the API has routes for (no SettlementStatus),
// defined here because this package cannot import gate (gate's tests import it), and so
// that the handler's tests can script faults with a three-method fake. *facilitator.Service
// satisfies it; detailed health comes through HandlerOptions.HealthInfo.
type Backend interface {
	Verify(ctx context.Context, in x402.VerifyInput) (x402.VerifyResponse, error)
	Settle(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error)
	Supported(ctx context.Context) (x402.SupportedResponse, error)
}

type apiRoute struct {
	method string
	open   bool // served without the API key (only /health, docs/facilitator.md#api)
	serve  func(*apiHandler, http.ResponseWriter, *http.Request)
}

var apiRoutes = map[string]apiRoute{
	"/verify":             {method: http.MethodPost, serve: (*apiHandler).serveVerify},
	"/settle":             {method: http.MethodPost, serve: (*apiHandler).serveSettle},
	"/verification/quote": {method: http.MethodPost, serve: (*apiHandler).serveQuote},
	"/supported":          {method: http.MethodGet, serve: (*apiHandler).serveSupported},
	"/health":             {method: http.MethodGet, open: true, serve: (*apiHandler).serveHealth},
}

type apiHandler struct {
	backend Backend
	opts    HandlerOptions
	log     *zap.Logger
	keyHash [sha256.Size]byte
	pricing *jsonhttp.Client
}

// NewHandler returns the facilitator HTTP API over backend (docs/facilitator.md#api):
//
//	POST /verify               {x402Version?, paymentPayload, paymentRequirements, verificationRequirements?, verificationPayment?}
//	POST /settle               {x402Version?, paymentPayload, paymentRequirements}
//	POST /verification/quote   {resource}
//	GET  /supported
//	GET  /health
//
// The paths are relative to the handler's root: mount it with PathPrefix, http.StripPrefix,
// or Caddy's handle_path. HEAD is answered for the GET routes.
//
// Status rules. The body envelope is the API's business: a body that is not a JSON object,
// or lacks paymentPayload or paymentRequirements (absent or null), is 400
// {"error":"invalid_request","reason","message"}; a body over MaxBodyBytes is 413; a
// Content-Type other than application/json is 415. What is inside the envelope is the
// payment's business: a payload or requirement that does not decode, or an unsupported
// x402Version, is a logical failure, HTTP 200 with isValid:false / success:false and the
// reason in the request's x402 version, as the reference x402 facilitators answer
// (docs/facilitator.md#api). A non-nil error from backend is 500 with
// unexpected_verify_error / unexpected_settle_error and no detail (the error is logged).
//
// A *facilitator.Service keeps no proof between a /verify and a /settle: a remote /settle
// runs every check (docs/facilitator.md#settle-order).
func NewHandler(backend Backend, opts HandlerOptions) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.PricingTimeout <= 0 {
		opts.PricingTimeout = DefaultPricingTimeout
	}
	opts.PathPrefix = strings.TrimRight(opts.PathPrefix, "/")
	if opts.Registry == nil {
		opts.Registry = x402.NewRegistry()
	}
	h := &apiHandler{backend: backend, opts: opts, log: opts.Logger, pricing: jsonhttp.New(nil, maxPricingResponseBytes, opts.PricingTimeout)}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	if opts.APIKey != "" {
		h.keyHash = sha256.Sum256([]byte(opts.APIKey))
	}
	return h
}

// ServeHTTP routes: unknown path 404, wrong method 405 with Allow, missing or wrong key
// 401, then the route.
func (h *apiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if h.opts.PathPrefix != "" {
		rest, ok := strings.CutPrefix(path, h.opts.PathPrefix)
		if !ok || (rest != "" && rest[0] != '/') {
			writeAPIError(w, http.StatusNotFound, apiError{Error: errCodeNotFound})
			return
		}
		path = rest
	}
	route, ok := apiRoutes[path]
	if !ok {
		writeAPIError(w, http.StatusNotFound, apiError{Error: errCodeNotFound})
		return
	}
	if r.Method != route.method && !(route.method == http.MethodGet && r.Method == http.MethodHead) {
		allow := route.method
		if route.method == http.MethodGet {
			allow += ", " + http.MethodHead
		}
		w.Header().Set("Allow", allow)
		writeAPIError(w, http.StatusMethodNotAllowed, apiError{Error: errCodeMethod})
		return
	}
	if !route.open && !h.authorized(r) {
		writeAPIError(w, http.StatusUnauthorized, apiError{Error: errCodeUnauthorized})
		return
	}
	route.serve(h, w, r)
}

// authorized checks x-facilitator-key in constant time (docs/facilitator.md#api). Both
// sides are hashed first so that the comparison does not leak the key's length either.
// The header must come once: with two, a proxy in between and this handler could each
// read a different one.
func (h *apiHandler) authorized(r *http.Request) bool {
	if h.opts.APIKey == "" {
		return true
	}
	vals := r.Header.Values(HeaderFacilitatorKey)
	if len(vals) != 1 {
		return false
	}
	got := sha256.Sum256([]byte(vals[0]))
	return subtle.ConstantTimeCompare(got[:], h.keyHash[:]) == 1
}

// readJSONBody enforces the content type and size cap and parses the body as one JSON
// object, keys matched exactly. On failure it has already answered and returns false.
func (h *apiHandler) readJSONBody(w http.ResponseWriter, r *http.Request) (map[string]json.RawMessage, bool) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		writeAPIError(w, http.StatusUnsupportedMediaType, apiError{Error: errCodeMediaType, Reason: reasonNotJSON,
			Message: "Content-Type must be application/json"})
		return nil, false
	}
	var buf bytes.Buffer
	_, err = buf.ReadFrom(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeAPIError(w, http.StatusRequestEntityTooLarge, apiError{Error: errCodeTooLarge, Reason: reasonBodyTooLarge,
				Message: fmt.Sprintf("request body exceeds %d bytes", h.opts.MaxBodyBytes)})
			return nil, false
		}
		writeAPIError(w, http.StatusBadRequest, apiError{Error: errCodeInvalid, Reason: reasonMalformedJSON,
			Message: "request body could not be read"})
		return nil, false
	}
	body := bytes.TrimSpace(buf.Bytes())
	var m map[string]json.RawMessage
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &m) != nil {
		writeAPIError(w, http.StatusBadRequest, apiError{Error: errCodeInvalid, Reason: reasonMalformedJSON,
			Message: "request body must be one JSON object"})
		return nil, false
	}
	return m, true
}

// present reports whether key is in m with a value other than null.
func present(m map[string]json.RawMessage, key string) bool {
	v, ok := m[key]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

// writeJSON writes v as the JSON answer with status. Answers are never cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal_error"}`)
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeAPIError(w http.ResponseWriter, status int, e apiError) { writeJSON(w, status, e) }

// serveSupported answers GET /supported with backend.Supported.
func (h *apiHandler) serveSupported(w http.ResponseWriter, r *http.Request) {
	s, err := h.backend.Supported(r.Context())
	if err != nil {
		h.log.Error("supported failed", zap.Error(err))
		writeAPIError(w, http.StatusInternalServerError, apiError{Error: "unexpected_error"})
		return
	}
	if s.Kinds == nil {
		s.Kinds = []x402.SupportedKind{}
	}
	if s.Extensions == nil {
		s.Extensions = []string{}
	}
	if s.Signers == nil {
		s.Signers = map[string][]string{}
	}
	writeJSON(w, http.StatusOK, s)
}

// serveVerify answers POST /verify (docs/facilitator.md#verify).
func (h *apiHandler) serveVerify(w http.ResponseWriter, r *http.Request) {
	m, ok := h.readJSONBody(w, r)
	if !ok || !h.requireFields(w, m) {
		return
	}
	pr, reason, err := h.decodePaymentRequest(m)
	if err == nil {
		var in x402.VerifyInput
		in, reason, err = h.verifyInput(m, pr)
		if err == nil {
			h.runVerify(r.Context(), w, pr, in)
			return
		}
	}
	h.debug("verify refused at decode", reason, err)
	writeJSON(w, http.StatusOK, x402.VerifyResponse{IsValid: false, InvalidReason: reason.For(pr.version)})
}

// verifyInput adds the optional verification-fee requirement and payment to pr.
func (h *apiHandler) verifyInput(m map[string]json.RawMessage, pr paymentRequest) (x402.VerifyInput, x402.Reason, error) {
	in := x402.VerifyInput{Payment: pr.payment, Requirements: pr.reqs}
	feeVersion := pr.version
	if present(m, "verificationPayment") {
		p, err := x402.DecodePayloadJSON(m["verificationPayment"], h.opts.Registry)
		if err != nil {
			return in, x402.ReasonOf(err), fmt.Errorf("verification payment: %w", err)
		}
		in.VerificationPayment, feeVersion = p, p.Version
	}
	if present(m, "verificationRequirements") {
		rq, err := x402.DecodeRequirementsJSON(m["verificationRequirements"], feeVersion, h.opts.Registry)
		if err != nil {
			return in, x402.ReasonOf(err), fmt.Errorf("verification requirements: %w", err)
		}
		in.VerificationRequirements = rq
	}
	return in, "", nil
}

func (h *apiHandler) runVerify(ctx context.Context, w http.ResponseWriter, pr paymentRequest, in x402.VerifyInput) {
	resp, err := h.backend.Verify(ctx, in)
	if err != nil {
		h.log.Error("verify failed", zap.String("network", pr.network), zap.Error(err))
		writeJSON(w, http.StatusInternalServerError, x402.VerifyResponse{
			IsValid: false, InvalidReason: x402.ReasonUnexpectedVerify.For(pr.version), Payer: resp.Payer})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// settleBody is the wire form of a settle answer: txHash is always present beside
// transaction, with the same value: clients read transaction, the facilitator API names
// txHash (docs/facilitator.md#api).
type settleBody struct {
	x402.SettleResponse
	TxHash string `json:"txHash"`
}

func newSettleBody(resp x402.SettleResponse, network string) settleBody {
	if resp.Transaction == "" {
		resp.Transaction = resp.TxHash
	}
	if resp.Network == "" {
		resp.Network = network
	}
	return settleBody{SettleResponse: resp, TxHash: resp.Transaction}
}

// serveSettle answers POST /settle (docs/facilitator.md#settle-order). A 500 carries the
// transaction hash when the engine returned one with its error: a broadcast whose outcome
// is unknown must be reconciled, never blindly retried, and the hash is public.
func (h *apiHandler) serveSettle(w http.ResponseWriter, r *http.Request) {
	m, ok := h.readJSONBody(w, r)
	if !ok || !h.requireFields(w, m) {
		return
	}
	pr, reason, err := h.decodePaymentRequest(m)
	if err != nil {
		h.debug("settle refused at decode", reason, err)
		writeJSON(w, http.StatusOK, newSettleBody(x402.SettleResponse{
			Success: false, ErrorReason: reason.For(pr.version)}, pr.network))
		return
	}
	resp, err := h.backend.Settle(r.Context(), pr.payment, pr.reqs)
	if err != nil {
		h.log.Error("settle failed", zap.String("network", pr.network), zap.String("tx", resp.Transaction), zap.Error(err))
		writeJSON(w, http.StatusInternalServerError, newSettleBody(x402.SettleResponse{
			Success: false, ErrorReason: x402.ReasonUnexpectedSettle.For(pr.version),
			Payer: resp.Payer, Transaction: resp.Transaction, TxHash: resp.TxHash}, pr.network))
		return
	}
	writeJSON(w, http.StatusOK, newSettleBody(resp, pr.network))
}

// requireFields answers 400 when the envelope lacks paymentPayload or
// paymentRequirements (absent or null).
func (h *apiHandler) requireFields(w http.ResponseWriter, m map[string]json.RawMessage) bool {
	switch {
	case !present(m, "paymentPayload"):
		writeAPIError(w, http.StatusBadRequest, apiError{Error: errCodeInvalid, Reason: reasonMissingPayload,
			Message: "paymentPayload is required"})
		return false
	case !present(m, "paymentRequirements"):
		writeAPIError(w, http.StatusBadRequest, apiError{Error: errCodeInvalid, Reason: reasonMissingReqs,
			Message: "paymentRequirements is required"})
		return false
	}
	return true
}

// debug logs a refused request's reason. A DecodeError's text names fields, never input
// bytes, so it is safe to log.
func (h *apiHandler) debug(msg string, reason x402.Reason, err error) {
	if ce := h.log.Check(zap.DebugLevel, msg); ce != nil {
		ce.Write(zap.String("reason", string(reason)), zap.Error(err))
	}
}
