package gate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"github.com/x402gate/x402gate/x402"
)

// The x402 v2 payment-identifier extension (docs/gate.md#payment-identifier) lets a client
// name a payment with an id of its own, so sending the same payment again is safe: the
// same id with the same payment payload is never charged twice, and is served again under
// the rules of a retry credit (one request at a time, holding a lease; a payment buys one
// good answer; at most RetryConfig.Max runs after a failed one). The same id with another
// payload is a conflict (409). A route that requires an id refuses a payment without one
// (400). An id is no credit pool of its own: it names its payment's record in the Ledger
// (docs/gate.md#payment-ledger), which also holds the retry token's credits, so an id,
// another id and the retry token all draw on one payment's one good answer.

// PaymentIdentifierExtension is the key of the extension in a PaymentRequired's and a
// payment's extensions.
const PaymentIdentifierExtension = "payment-identifier"

// Config.PaymentID values.
const (
	// PaymentIDOptional advertises the extension; a payment may carry an id.
	PaymentIDOptional = "optional"
	// PaymentIDRequired advertises it as required; a payment without an id is refused.
	PaymentIDRequired = "required"
)

// Bounds of an id, as @x402/extensions checks it (isValidPaymentId): 16 to 128 of
// [A-Za-z0-9_-].
const (
	PaymentIDMinLength = 16
	PaymentIDMaxLength = 128
)

// Reasons of a refused payment identifier. They travel as they are: no x402 enum names them.
const (
	// ReasonPaymentIDRequired: the route requires an id and the payment has none (400).
	ReasonPaymentIDRequired x402.Reason = "payment_identifier_required"
	// ReasonPaymentIDConflict: the id names another payment payload (409).
	ReasonPaymentIDConflict x402.Reason = "payment_identifier_conflict"
	// ReasonPaymentIDUsed: the payment named by the id was settled and got its good
	// answer; it buys no other (409).
	ReasonPaymentIDUsed x402.Reason = "payment_identifier_used"
)

// schemaDraft2020 is the $schema of the extension schemas the gate declares.
const schemaDraft2020 = "https://json-schema.org/draft/2020-12/schema"

// paymentIDDeclaration is the extension as declarePaymentIdentifierExtension builds it.
func paymentIDDeclaration(required bool) map[string]any {
	return map[string]any{
		"info": map[string]any{"required": required},
		"schema": map[string]any{
			"$schema": schemaDraft2020,
			"type":    "object",
			"properties": map[string]any{
				"required": map[string]any{"type": "boolean"},
				"id": map[string]any{
					"type": "string", "minLength": PaymentIDMinLength, "maxLength": PaymentIDMaxLength,
					"pattern": "^[a-zA-Z0-9_-]+$",
				},
			},
			"required": []any{"required"},
		},
	}
}

// paymentIDOf reads the id a v2 payment carries in extensions["payment-identifier"].info.id;
// "" when it carries none. A malformed one is an error.
func paymentIDOf(p *x402.Payment) (string, error) {
	ext, ok := p.Extensions[PaymentIdentifierExtension]
	if !ok || ext == nil {
		return "", nil
	}
	m, ok := ext.(map[string]any)
	if !ok {
		return "", errors.New("payment-identifier is not an object")
	}
	info, ok := m["info"].(map[string]any)
	if !ok {
		return "", errors.New("payment-identifier has no info object")
	}
	v, ok := info["id"]
	if !ok || v == nil {
		return "", nil
	}
	id, ok := v.(string)
	if !ok || !validPaymentID(id) {
		return "", fmt.Errorf("payment-identifier id must be %d to %d characters of A-Z, a-z, 0-9, _ and -", PaymentIDMinLength, PaymentIDMaxLength)
	}
	return id, nil
}

func validPaymentID(id string) bool {
	if len(id) < PaymentIDMinLength || len(id) > PaymentIDMaxLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// paymentIDKey names the index entry of a payer's id: an id names one payment of its
// payer (docs/gate.md#payment-ledger).
func paymentIDKey(p *x402.Payment, id string) string {
	sum := sha256.Sum256([]byte("payment-id\n" + p.Authorization.From.Hex() + "\n" + id))
	return "payid:" + hex.EncodeToString(sum[:])
}

// paymentIDFor reads the payment identifier of p when the route advertises the extension:
// "" when it has none or the route does not read ids. A malformed id, or none on a route
// that requires one, is refused (400).
func (g *Gate) paymentIDFor(req *x402.Requirements, p *x402.Payment) (string, *Result) {
	if g.route.paymentID == "" {
		return "", nil
	}
	id, err := paymentIDOf(p)
	if err != nil {
		return "", g.errorResult(req, p.Version, http.StatusBadRequest, x402.ReasonInvalidPayload, err.Error())
	}
	if id == "" && g.route.paymentID == PaymentIDRequired {
		return "", g.errorResult(req, p.Version, http.StatusBadRequest, ReasonPaymentIDRequired,
			"this route requires a payment-identifier id in the payment's extensions (x402 v2)")
	}
	return id, nil
}
