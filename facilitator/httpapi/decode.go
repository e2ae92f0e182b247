package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/x402gate/x402gate/x402"
)

// paymentRequest is a decoded /verify or /settle body.
type paymentRequest struct {
	version int // the request's x402 version; 0 while unknown
	network string
	payment *x402.Payment
	reqs    *x402.Requirements
}

// decodePaymentRequest decodes the envelope's payment fields. The request's version is
// the top-level x402Version when present, else the payload's own; the requirement is
// decoded in the payment's version shape. A failure returns the Reason to answer with;
// pr.version and pr.network are filled as far as they could be read, so the answer can
// still use the request's reason and network format.
func (h *apiHandler) decodePaymentRequest(m map[string]json.RawMessage) (paymentRequest, x402.Reason, error) {
	var pr paymentRequest
	top, topErr := 0, error(nil)
	if present(m, "x402Version") {
		top, topErr = wireVersion(m["x402Version"])
	}
	pr.version = top
	if pr.version == 0 {
		pr.version, _ = wireVersion(peekField(m["paymentPayload"], "x402Version"))
	}
	pr.network = h.networkFor(pr.version, peekString(m["paymentRequirements"], "network"))
	if topErr != nil {
		return pr, x402.ReasonInvalidVersion, topErr
	}
	p, err := x402.DecodePayloadJSON(m["paymentPayload"], h.opts.Registry)
	if err != nil {
		return pr, x402.ReasonOf(err), fmt.Errorf("payment payload: %w", err)
	}
	if top != 0 && p.Version != top {
		return pr, x402.ReasonInvalidVersion, fmt.Errorf("x402Version %d, payload version %d", top, p.Version)
	}
	pr.version = p.Version
	rq, err := x402.DecodeRequirementsJSON(m["paymentRequirements"], p.Version, h.opts.Registry)
	if err != nil {
		return pr, x402.ReasonOf(err), fmt.Errorf("payment requirements: %w", err)
	}
	pr.payment, pr.reqs = p, rq
	pr.network = h.networkFor(pr.version, rq.Network)
	return pr, "", nil
}

// wireVersion reads an x402Version value: exactly the JSON integer 1 or 2.
func wireVersion(raw json.RawMessage) (int, error) {
	switch string(bytes.TrimSpace(raw)) {
	case "1":
		return x402.Version1, nil
	case "2":
		return x402.Version2, nil
	}
	return 0, errors.New("x402Version must be 1 or 2")
}

// peekField returns the raw value of key in the JSON object raw, or nil.
func peekField(raw json.RawMessage, key string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m[key]
}

// peekString returns the string value of key in the JSON object raw, or "".
func peekString(raw json.RawMessage, key string) string {
	var s string
	if json.Unmarshal(peekField(raw, key), &s) != nil {
		return ""
	}
	return s
}

// networkFor renders a known network in the form of x402 version v: the v1 name for v1, the
// CAIP-2 id otherwise (docs/facilitator.md#api). An unknown network is "",
// so client input that did not decode is never echoed.
func (h *apiHandler) networkFor(v int, id string) string {
	if id == "" {
		return ""
	}
	n, ok := h.opts.Registry.Lookup(id)
	if !ok {
		return ""
	}
	if v == x402.Version1 {
		return n.Name
	}
	return n.CAIP2
}
