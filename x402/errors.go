package x402

import (
	"errors"
	"fmt"
)

// Sentinel causes carried by a DecodeError, for callers that must tell them apart with
// errors.Is (the Reason alone is coarser).
var (
	// ErrTooLarge: the input exceeds its size cap and was not decoded.
	ErrTooLarge = errors.New("input too large")
	// ErrSignatureLength: the signature is not 65 bytes, so it is not a plain ECDSA
	// signature (it may be an ERC-1271 or ERC-6492 smart-wallet signature).
	ErrSignatureLength = errors.New("signature is not 65 bytes")
	// ErrSignatureMalleable: s is in the upper half of the curve order; OpenZeppelin's
	// ECDSA library and go-ethereum's homestead rules refuse it.
	ErrSignatureMalleable = errors.New("signature s value is in the upper half order")
	// ErrSignatureInvalid: the signature's v, r or s are out of range, or recovery failed.
	ErrSignatureInvalid = errors.New("signature is invalid")
)

// DecodeError is a refusal of malformed or unacceptable input. Reason is the
// machine-readable code to answer with; Field names the offending JSON field as a dotted
// path ("payload.authorization.nonce"), or is empty for the input as a whole.
type DecodeError struct {
	Reason Reason
	Field  string
	Msg    string
	Err    error // optional cause (a sentinel above, or a wrapped library error)
}

// Error renders "field: msg" without any input bytes, so it is safe to log.
func (e *DecodeError) Error() string {
	switch {
	case e.Field != "" && e.Err != nil && e.Msg != "":
		return fmt.Sprintf("%s: %s: %v", e.Field, e.Msg, e.Err)
	case e.Field != "" && e.Msg != "":
		return e.Field + ": " + e.Msg
	case e.Field != "" && e.Err != nil:
		return fmt.Sprintf("%s: %v", e.Field, e.Err)
	case e.Err != nil && e.Msg != "":
		return fmt.Sprintf("%s: %v", e.Msg, e.Err)
	case e.Err != nil:
		return e.Err.Error()
	}
	return e.Msg
}

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *DecodeError) Unwrap() error { return e.Err }

// ReasonCode returns e.Reason; ReasonOf uses it.
func (e *DecodeError) ReasonCode() Reason { return e.Reason }

// MismatchError says a payment does not fit a requirement: which field differs and the
// Reason to answer with. Want and Got are the compared values as text.
type MismatchError struct {
	Reason Reason
	Field  string
	Want   string
	Got    string
}

// Error renders the mismatch.
func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s mismatch: want %q, got %q", e.Field, e.Want, e.Got)
}

// ReasonCode returns e.Reason; ReasonOf uses it.
func (e *MismatchError) ReasonCode() Reason { return e.Reason }

// reasoner is any error that carries a Reason.
type reasoner interface{ ReasonCode() Reason }

// ReasonOf returns the Reason carried by err or by any error it wraps. It returns "" for
// nil and ReasonInvalidPayload for an error without a Reason (fail closed: an unknown
// failure of a decoder is a refusal of the payload).
func ReasonOf(err error) Reason {
	if err == nil {
		return ""
	}
	var r reasoner
	if errors.As(err, &r) {
		return r.ReasonCode()
	}
	return ReasonInvalidPayload
}

func errPayload(field, msg string) *DecodeError {
	return &DecodeError{Reason: ReasonInvalidPayload, Field: field, Msg: msg}
}

func errRequirements(field, msg string) *DecodeError {
	return &DecodeError{Reason: ReasonInvalidRequirements, Field: field, Msg: msg}
}
