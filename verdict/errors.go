package verdict

import "errors"

var (
	// ErrInvalidResponse is a malformed or inconsistent answer: bad JSON, an unknown
	// outcome, a reasonCode that disagrees with the outcome, a missing requestHash. It is
	// never an approval (docs/verdict.md#fail-closed). Returned as *ValidationError.
	ErrInvalidResponse = errors.New("invalid response from verdict service")
	// ErrInvalidInput is a caller-side problem found before anything is sent: a payment
	// that cannot become a PaymentAction, an empty prompt, a bad configuration. Returned as
	// *InputError.
	ErrInvalidInput = errors.New("invalid input")
)

// ValidationError is an answer that failed strict validation (docs/verdict.md#verdict). Field is a
// JSON path such as "verdict.checks[2].status"; Problem says which rule failed. Neither
// quotes a value from the answer.
type ValidationError struct {
	// Op names the operation whose answer was invalid.
	Op string
	// RequestHash is the transaction concerned, when known.
	RequestHash string
	// Field is the JSON path of the offending field ("" for the document itself).
	Field string
	// Problem names the broken rule.
	Problem string
}

// Error returns a non-sensitive message naming the requestHash, the field and the rule.
func (e *ValidationError) Error() string {
	s := e.Op + ": invalid response"
	if e.RequestHash != "" {
		s += " for request " + e.RequestHash
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	return s + ": " + e.Problem
}

// Unwrap returns ErrInvalidResponse.
func (e *ValidationError) Unwrap() error { return ErrInvalidResponse }

// InputError is caller input refused before anything was sent.
type InputError struct {
	// Field names the offending input, e.g. "payment.authorization.value".
	Field string
	// Problem names the broken rule.
	Problem string
}

// Error returns the field and the rule.
func (e *InputError) Error() string { return "invalid input: " + e.Field + ": " + e.Problem }

// Unwrap returns ErrInvalidInput.
func (e *InputError) Unwrap() error { return ErrInvalidInput }
