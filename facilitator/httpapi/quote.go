package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/internal/jsonhttp"
)

// maxPricingResponseBytes caps a pricing service answer: one requirement is under 1 KiB.
const maxPricingResponseBytes = 64 << 10

const reasonInvalidResource = "invalid_resource"

// errPricingAnswer is a pricing answer that is not {"requirements": object or null}.
var errPricingAnswer = errors.New("pricing answer is not {requirements: object or null}")

// quoteBody is both the request of POST /verification/quote and what is sent on to the
// pricing service: {resource: PaymentRequirements} (docs/facilitator.md#verification-fee).
type quoteBody struct {
	Resource json.RawMessage `json:"resource"`
}

// quoteAnswer is the 200 answer: {requirements: PaymentRequirements or null}.
type quoteAnswer struct {
	Requirements json.RawMessage `json:"requirements"`
}

// serveQuote answers POST /verification/quote (docs/facilitator.md#verification-fee). It
// is a pass-through: the gateway computes no fee. Without a resource it is 400; without a
// pricing URL the answer is {"requirements": null}; when pricing is unreachable, answers
// non-2xx, redirects, is too large or malformed, the answer is 502
// {"error":"pricing_unavailable"} and no upstream detail reaches the caller (it is logged,
// without the answer's body).
func (h *apiHandler) serveQuote(w http.ResponseWriter, r *http.Request) {
	m, ok := h.readJSONBody(w, r)
	if !ok {
		return
	}
	if !present(m, "resource") {
		writeAPIError(w, http.StatusBadRequest, apiError{Error: errCodeInvalid, Reason: reasonMissingRes,
			Message: "resource is required"})
		return
	}
	res := bytes.TrimSpace(m["resource"])
	if res[0] != '{' {
		writeAPIError(w, http.StatusBadRequest, apiError{Error: errCodeInvalid, Reason: reasonInvalidResource,
			Message: "resource must be a payment requirements object"})
		return
	}
	if h.opts.PricingURL == "" {
		writeJSON(w, http.StatusOK, quoteAnswer{Requirements: json.RawMessage("null")})
		return
	}
	reqs, err := h.fetchPricing(r.Context(), res)
	if err != nil {
		h.log.Warn("pricing service unavailable", zap.Error(err))
		writeAPIError(w, http.StatusBadGateway, apiError{Error: errCodePricing})
		return
	}
	writeJSON(w, http.StatusOK, quoteAnswer{Requirements: reqs})
}

// fetchPricing POSTs {resource} to the pricing service and returns its requirements (a JSON
// object) or null. Any status but 2xx is an error (docs/facilitator.md#verification-fee).
// Errors carry the status or the transport cause, never the answer's body.
func (h *apiHandler) fetchPricing(ctx context.Context, resource json.RawMessage) (json.RawMessage, error) {
	data, err := json.Marshal(quoteBody{Resource: resource})
	if err != nil {
		return nil, fmt.Errorf("pricing: encode request: %w", err)
	}
	reply, err := h.pricing.Do(ctx, jsonhttp.Request{Method: http.MethodPost, URL: h.opts.PricingURL, Body: data})
	if err != nil {
		return nil, fmt.Errorf("pricing: %w", err)
	}
	if reply.Status < 200 || reply.Status > 299 {
		return nil, fmt.Errorf("pricing: http %d", reply.Status)
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(reply.Body, &m) != nil {
		return nil, fmt.Errorf("pricing: %w", errPricingAnswer)
	}
	reqs, ok := m["requirements"]
	if !ok {
		return nil, fmt.Errorf("pricing: %w", errPricingAnswer)
	}
	reqs = bytes.TrimSpace(reqs)
	if string(reqs) == "null" {
		return reqs, nil
	}
	if reqs[0] != '{' {
		return nil, fmt.Errorf("pricing: %w", errPricingAnswer)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, reqs); err != nil {
		return nil, fmt.Errorf("pricing: %w", errPricingAnswer)
	}
	return compact.Bytes(), nil
}
