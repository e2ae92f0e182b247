package verdictclient

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/x402gate/x402gate/verdict"
)

// Sentinel errors. Every error this package returns wraps at least one of them, so a
// caller tells cases apart with errors.Is and never by reading a message. No error
// message ever contains an API key (docs/verdict.md#secrets); messages carry the requestHash or the
// client-chosen trace id where one is known.
var (
	// ErrBadRequest is HTTP 400: the service refused the request body or action. Correct
	// it; do not retry it unchanged (docs/verdict.md#fail-closed).
	ErrBadRequest = errors.New("verdict service: bad request (400)")
	// ErrUnauthorized is HTTP 401: authentication failed. Replace or re-issue the key.
	ErrUnauthorized = errors.New("verdict service: unauthorized (401)")
	// ErrForbidden is HTTP 403: scope, ownership, agent or registered-wallet mismatch.
	// Correct the configuration.
	ErrForbidden = errors.New("verdict service: forbidden (403)")
	// ErrNotFound is HTTP 404: unknown request (or route). Check the captured requestHash
	// and the base URL.
	ErrNotFound = errors.New("verdict service: not found (404)")
	// ErrConflict is HTTP 409 on submit: a transaction with this trace id already exists.
	// The earlier submit went through; find it with Client.Reconcile.
	ErrConflict = errors.New("verdict service: conflict (409)")
	// ErrRateLimited is HTTP 429. Transient for reads; never retried for a submit.
	ErrRateLimited = errors.New("verdict service: rate limited (429)")
	// ErrServerError is any HTTP 5xx. Transient for reads; never retried for a submit.
	ErrServerError = errors.New("verdict service: server error (5xx)")
	// ErrRedirect is any 3xx answer. The shared JSON transport never follows redirects.
	ErrRedirect = errors.New("redirect refused")
	// ErrUnexpectedStatus is any other HTTP status.
	ErrUnexpectedStatus = errors.New("unexpected http status")

	// ErrNetwork is a failure to reach the service or to read its answer (connection
	// refused or reset, a per-request timeout while the caller's context is still live).
	// Transient for reads.
	ErrNetwork = errors.New("network failure")
	// ErrResponseTooLarge means the answer exceeded MaxResponseBytes.
	ErrResponseTooLarge = errors.New("response too large")
	// ErrContentType means a successful answer did not declare a JSON content type.
	ErrContentType = errors.New("response is not application/json")

	// ErrInvalidResponse is verdict.ErrInvalidResponse: a malformed or inconsistent
	// answer, returned as *verdict.ValidationError. It is never an approval.
	ErrInvalidResponse = verdict.ErrInvalidResponse
	// ErrInvalidInput is verdict.ErrInvalidInput: caller input refused before anything
	// was sent, returned as *verdict.InputError.
	ErrInvalidInput = verdict.ErrInvalidInput

	// ErrUncertainSubmit means a POST /transactions may or may not have created a
	// transaction (429, 5xx, network failure, an unreadable 201). Never resubmit blindly:
	// reconcile with the trace id first (docs/verdict.md#envelope rules 4–5). Returned as
	// *UncertainSubmitError.
	ErrUncertainSubmit = errors.New("submit outcome unknown")
	// ErrPollBound means polling used every attempt without reaching a terminal verdict
	// (docs/verdict.md#fail-closed). Returned as *PollBoundError.
	ErrPollBound = errors.New("polling bound reached without a terminal verdict")
	// ErrNotCreated is Reconcile's definite answer that no transaction carries the trace id.
	ErrNotCreated = errors.New("no transaction with this trace id")
	// ErrReconcileUnsupported means the service has no trace-id lookup route, so an
	// uncertain submit cannot be settled automatically: keep the action paused and ask an
	// operator.
	ErrReconcileUnsupported = errors.New("verdict service does not support trace id lookup")
)

// StatusError is a non-success HTTP status from the verdict service or the pricing
// service. It unwraps to the sentinel for its class (ErrUnauthorized, ErrServerError, …).
type StatusError struct {
	// Op names the operation: "submit", "approval status", "reconcile", "pricing".
	Op string
	// Status is the HTTP status code.
	Status int
	// RequestHash is the transaction the request was about, when known.
	RequestHash string
	// RetryAfter is the server's Retry-After hint on 429 and 503, zero when absent.
	RetryAfter time.Duration
	// Message is the service's own "message" field from a JSON error body, truncated to
	// 200 bytes, with control characters dropped and any API key removed. It is kept for
	// diagnostics and is not part of Error().
	Message string
}

// Error returns a message without any server-supplied text.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s: http %d %s", e.Op, e.Status, http.StatusText(e.Status))
	if e.RequestHash != "" {
		s += " (request " + e.RequestHash + ")"
	}
	return s
}

// Unwrap returns the sentinel of the status class.
func (e *StatusError) Unwrap() error { return statusSentinel(e.Status) }

func statusSentinel(code int) error {
	switch {
	case code == http.StatusBadRequest:
		return ErrBadRequest
	case code == http.StatusUnauthorized:
		return ErrUnauthorized
	case code == http.StatusForbidden:
		return ErrForbidden
	case code == http.StatusNotFound:
		return ErrNotFound
	case code == http.StatusConflict:
		return ErrConflict
	case code == http.StatusTooManyRequests:
		return ErrRateLimited
	case code >= 500 && code <= 599:
		return ErrServerError
	case code >= 300 && code <= 399:
		return ErrRedirect
	default:
		return ErrUnexpectedStatus
	}
}

// UncertainSubmitError reports a POST /transactions whose outcome is unknown. TraceID is
// the value sent as metadata.traceId; pass it to Client.Reconcile to learn whether the
// transaction exists before doing anything else.
type UncertainSubmitError struct {
	// TraceID is the client-chosen trace id of the submit.
	TraceID string
	// Cause is what went wrong (a *StatusError, a network error, a *ValidationError of
	// the 201 body, or the context's error).
	Cause error
}

// Error says what happened and what to do next.
func (e *UncertainSubmitError) Error() string {
	return "submit outcome unknown (trace id " + e.TraceID + "); reconcile before resubmitting: " + e.Cause.Error()
}

// Unwrap returns ErrUncertainSubmit and the cause.
func (e *UncertainSubmitError) Unwrap() []error { return []error{ErrUncertainSubmit, e.Cause} }

// PollBoundError reports that Await used all its attempts. Last is the failure of the
// final attempt, or nil when the verdict was simply still missing or pending: nil means
// "timeout", non-nil means "service unavailable".
type PollBoundError struct {
	// RequestHash is the transaction polled.
	RequestHash string
	// Attempts is how many GET requests were made.
	Attempts int
	// Last is the error of the final attempt, nil when it returned a pending verdict.
	Last error
}

// Error names the request, the attempts and the last failure.
func (e *PollBoundError) Error() string {
	s := fmt.Sprintf("await verdict for request %s: no terminal verdict after %d attempts", e.RequestHash, e.Attempts)
	if e.Last != nil {
		s += ": " + e.Last.Error()
	}
	return s
}

// Unwrap returns ErrPollBound and the last failure.
func (e *PollBoundError) Unwrap() []error {
	if e.Last == nil {
		return []error{ErrPollBound}
	}
	return []error{ErrPollBound, e.Last}
}

// IsTransient reports whether err is a failure that a read (GET) may retry within its
// bound: HTTP 429, a 5xx, or a network failure (docs/verdict.md#envelope rule 3). It is never
// true for a context's own cancellation or deadline, nor for an uncertain submit, which
// must be reconciled and never repeated (docs/verdict.md#envelope rule 4).
func IsTransient(err error) bool {
	if errors.Is(err, ErrUncertainSubmit) {
		return false
	}
	return errors.Is(err, ErrRateLimited) || errors.Is(err, ErrServerError) || errors.Is(err, ErrNetwork)
}

// validator builds *verdict.ValidationError values for one answer of the client's own
// routes (reconcile, pricing).
type validator struct{ op string }

func (v validator) fail(field, problem string) error {
	return &verdict.ValidationError{Op: v.op, Field: field, Problem: problem}
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
