package gate

import (
	"net/http"

	"github.com/x402gate/x402gate/gate/credit"
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
const PaymentIdentifierExtension = credit.PaymentIDExtension

// Config.PaymentID values.
const (
	// PaymentIDOptional advertises the extension; a payment may carry an id.
	PaymentIDOptional = credit.PaymentIDOptional
	// PaymentIDRequired advertises it as required; a payment without an id is refused.
	PaymentIDRequired = credit.PaymentIDRequired
)

// Bounds of an id, as @x402/extensions checks it (isValidPaymentId): 16 to 128 of
// [A-Za-z0-9_-].
const (
	PaymentIDMinLength = credit.PaymentIDMinLength
	PaymentIDMaxLength = credit.PaymentIDMaxLength
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

// paymentIDFor reads the payment identifier of p when the route advertises the extension:
// "" when it has none or the route does not read ids. A malformed id, or none on a route
// that requires one, is refused (400).
func (g *Gate) paymentIDFor(req *x402.Requirements, p *x402.Payment) (string, *Result) {
	if g.route.paymentID == "" {
		return "", nil
	}
	id, err := credit.PaymentIDOf(p)
	if err != nil {
		return "", g.errorResult(req, p.Version, http.StatusBadRequest, x402.ReasonInvalidPayload, err.Error())
	}
	if id == "" && g.route.paymentID == PaymentIDRequired {
		return "", g.errorResult(req, p.Version, http.StatusBadRequest, ReasonPaymentIDRequired,
			"this route requires a payment-identifier id in the payment's extensions (x402 v2)")
	}
	return id, nil
}
