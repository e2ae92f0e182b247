package verdictserver

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// Error codes of the API's error body, by the status they come with
// (docs/verdict-api.md#errors). errorCodes is the one table: the docs page and the
// OpenAPI document list the same codes, and a test holds them to it.
const (
	codeInvalidBody          = "invalid_body"
	codeMalformedJSON        = "malformed_json"
	codeUnknownField         = "unknown_field"
	codePreEncrypted         = "pre_encrypted_not_allowed"
	codeConflictingAuth      = "conflicting_credentials"
	codeInvalidQuery         = "invalid_query"
	codeInvalidPolicy        = "invalid_policy"
	codeMissingKey           = "missing_key"
	codeInvalidKey           = "invalid_key"
	codeInsufficientScope    = "insufficient_scope"
	codeNotOwner             = "not_owner"
	codeWalletNotRegistered  = "wallet_not_registered"
	codeNotFound             = "not_found"
	codeMethodNotAllowed     = "method_not_allowed"
	codeDuplicateTrace       = "duplicate_trace_id"
	codeConflict             = "conflict"
	codeBodyTooLarge         = "body_too_large"
	codeUnsupportedMediaType = "unsupported_media_type"
	codeRateLimited          = "rate_limited"
	codeInternal             = "internal_error"
	codeUnavailable          = "unavailable"
)

// errorCodes maps every error code to its HTTP status.
var errorCodes = map[string]int{
	codeInvalidBody:          http.StatusBadRequest,
	codeMalformedJSON:        http.StatusBadRequest,
	codeUnknownField:         http.StatusBadRequest,
	codePreEncrypted:         http.StatusBadRequest,
	codeConflictingAuth:      http.StatusBadRequest,
	codeInvalidQuery:         http.StatusBadRequest,
	codeInvalidPolicy:        http.StatusBadRequest,
	codeMissingKey:           http.StatusUnauthorized,
	codeInvalidKey:           http.StatusUnauthorized,
	codeInsufficientScope:    http.StatusForbidden,
	codeNotOwner:             http.StatusForbidden,
	codeWalletNotRegistered:  http.StatusForbidden,
	codeNotFound:             http.StatusNotFound,
	codeMethodNotAllowed:     http.StatusMethodNotAllowed,
	codeDuplicateTrace:       http.StatusConflict,
	codeConflict:             http.StatusConflict,
	codeBodyTooLarge:         http.StatusRequestEntityTooLarge,
	codeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	codeRateLimited:          http.StatusTooManyRequests,
	codeInternal:             http.StatusInternalServerError,
	codeUnavailable:          http.StatusServiceUnavailable,
}

// apiError is the one error body of every 4xx and 5xx answer
// (docs/verdict-api.md#errors). Field names the request field at fault, when one is;
// Problems lists every problem of a policy document. Message never quotes a key.
type apiError struct {
	StatusCode int       `json:"statusCode"`
	Error      string    `json:"error"`
	Code       string    `json:"code"`
	Message    string    `json:"message"`
	Field      string    `json:"field,omitempty"`
	Problems   []problem `json:"problems,omitempty"`
}

// problem is one field error of a policy document.
type problem struct {
	Field   string `json:"field"`
	Problem string `json:"problem"`
}

// fieldError is a request that failed validation at one field.
type fieldError struct {
	code    string
	field   string
	message string
}

func (e *fieldError) Error() string {
	if e.field == "" {
		return e.message
	}
	return e.field + ": " + e.message
}

func badField(field, message string) *fieldError {
	return &fieldError{code: codeInvalidBody, field: field, message: message}
}

// newAPIError builds the body of code; the status follows from the code.
func newAPIError(code, message string) apiError {
	st, ok := errorCodes[code]
	if !ok {
		st, code = http.StatusInternalServerError, codeInternal
	}
	return apiError{StatusCode: st, Error: http.StatusText(st), Code: code, Message: message}
}

func writeError(w http.ResponseWriter, e apiError) {
	writeJSON(w, e.StatusCode, e)
}

func writeCode(w http.ResponseWriter, code, message string) {
	writeError(w, newAPIError(code, message))
}

// writeFieldError answers a *fieldError with its code, field and message.
func writeFieldError(w http.ResponseWriter, err error) {
	var fe *fieldError
	if !errors.As(err, &fe) {
		writeCode(w, codeInvalidBody, "invalid request")
		return
	}
	e := newAPIError(fe.code, fe.message)
	e.Field = fe.field
	writeError(w, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = json.Marshal(newAPIError(codeInternal, "answer could not be encoded"))
	}
	writeRaw(w, status, append(body, '\n'))
}

// The headers of every JSON answer, set as slices that are never modified.
var (
	headerJSON    = []string{"application/json"}
	headerNoStore = []string{"no-store"}
	headerNoSniff = []string{"nosniff"}
)

// writeRaw sends the concatenation of parts, a JSON document and its final newline,
// with status.
func writeRaw(w http.ResponseWriter, status int, parts ...[]byte) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	h := w.Header()
	h["Content-Type"] = headerJSON
	h["Cache-Control"] = headerNoStore
	h["X-Content-Type-Options"] = headerNoSniff
	h["Content-Length"] = []string{strconv.Itoa(n)}
	w.WriteHeader(status)
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return
		}
	}
}
