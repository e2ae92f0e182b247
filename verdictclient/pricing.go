package verdictclient

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// FetchVerificationRequirements asks the pricing service for the verification fee of a
// resource (docs/facilitator.md#verification-fee): it posts {"resource": resource} to
// pricingURL and decodes {"requirements": …} into a *T, nil when the service answers
// null (no fee applies). T is the wire form of payment requirements the caller speaks,
// e.g. x402.RequirementsV1, x402.RequirementsV2 or json.RawMessage.
//
// It uses the shared JSON transport: no redirects, at most MaxResponseBytes, a JSON
// content type. timeout bounds the request (zero means DefaultTimeout). Any non-2xx
// answer is a *StatusError; a body without a "requirements" member is a
// *ValidationError.
func FetchVerificationRequirements[T any](ctx context.Context, pricingURL string, resource T, timeout time.Duration) (*T, error) {
	u, err := checkURL(pricingURL, "pricingUrl")
	if err != nil {
		return nil, err
	}
	if timeout < 0 {
		return nil, &verdict.InputError{Field: "timeout", Problem: "must not be negative"}
	}
	body, err := json.Marshal(struct {
		Resource T `json:"resource"`
	}{resource})
	if err != nil {
		return nil, &verdict.InputError{Field: "resource", Problem: "cannot be encoded as json"}
	}
	t := newJSONTransport(nil, timeout)
	ans, err := t.do(ctx, call{op: "pricing", method: http.MethodPost, url: u, body: body})
	if err != nil {
		return nil, err
	}
	v := validator{op: "pricing"}
	tree, err := verdict.ParseJSON(ans.body)
	if err != nil {
		return nil, v.fail("", "malformed json: "+err.Error())
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return nil, v.fail("", "not a json object")
	}
	req, present := obj["requirements"]
	if !present {
		return nil, v.fail("requirements", "is missing")
	}
	if req == nil {
		return nil, nil
	}
	if _, ok := req.(map[string]any); !ok {
		return nil, v.fail("requirements", "must be an object or null")
	}
	// Re-encode the strictly parsed subtree so that only the exact key "requirements"
	// is ever read (encoding/json matches keys case-insensitively).
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, v.fail("requirements", "cannot be re-encoded")
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, v.fail("requirements", "does not match the requirements shape")
	}
	return out, nil
}

// Pricing returns the fee lookup of the pricing service at pricingURL for a merchant
// requirement, in our normalised form (docs/facilitator.md#verification-fee): it asks in
// the v2 wire form and decodes the answer strictly against reg, the networks the caller
// knows. It returns nil, nil when no fee applies. A gate takes it as its PricingFunc.
func Pricing(pricingURL string, reg *x402.Registry) func(ctx context.Context, merchant *x402.Requirements) (*x402.Requirements, error) {
	return func(ctx context.Context, merchant *x402.Requirements) (*x402.Requirements, error) {
		resource, err := json.Marshal(merchant.V2())
		if err != nil {
			return nil, &verdict.InputError{Field: "resource", Problem: "cannot be encoded as json"}
		}
		fee, err := FetchVerificationRequirements(ctx, pricingURL, json.RawMessage(resource), 0)
		if err != nil || fee == nil {
			return nil, err
		}
		return x402.DecodeRequirementsJSON(*fee, x402.Version2, reg)
	}
}
