// Package x402 is the x402 wire protocol, versions 1 and 2, for the "exact" scheme on EVM
// chains (EIP-3009, and Permit2 in v2) and the "upto" scheme (Permit2, v2): the JSON
// shapes, strict header codecs, one normalised internal form, the network registry, reason
// codes, and EIP-712 hashing and signer recovery of EIP-3009 TransferWithAuthorization and
// of Permit2's PermitWitnessTransferFrom. It does no I/O.
package x402

import "encoding/json"

// Protocol versions and the scheme every version implements (SchemeUpto is v2 only).
const (
	Version1    = 1
	Version2    = 2
	SchemeExact = "exact"
)

// HTTP header names of the x402 transports.
const (
	HeaderPayment           = "X-PAYMENT"          // v1 request: base64(PayloadV1)
	HeaderPaymentResponse   = "X-PAYMENT-RESPONSE" // v1 response: base64(SettleResponse)
	HeaderPaymentSignature  = "PAYMENT-SIGNATURE"  // v2 request: base64(PayloadV2)
	HeaderPaymentRequired   = "PAYMENT-REQUIRED"   // v2 402 answer: base64(PaymentRequiredV2)
	HeaderPaymentResponseV2 = "PAYMENT-RESPONSE"   // v2 response: base64(SettleResponse)
)

// RequirementsV1 is one entry of a v1 402 answer's accepts list. Its JSON must pass
// x402-fetch 1.2.0's zod schema: mimeType is always a string and outputSchema is omitted
// rather than null.
type RequirementsV1 struct {
	Scheme            string         `json:"scheme"`
	Network           string         `json:"network"`
	MaxAmountRequired string         `json:"maxAmountRequired"`
	Resource          string         `json:"resource"`
	Description       string         `json:"description"`
	MimeType          string         `json:"mimeType"`
	OutputSchema      map[string]any `json:"outputSchema,omitempty"`
	PayTo             string         `json:"payTo"`
	MaxTimeoutSeconds int            `json:"maxTimeoutSeconds"`
	Asset             string         `json:"asset"`
	Extra             map[string]any `json:"extra,omitempty"`
}

// ResourceInfo describes the paid resource in v2 (one per 402 answer).
type ResourceInfo struct {
	URL         string `json:"url"`
	Description string `json:"description,omitempty"`
	MimeType    string `json:"mimeType,omitempty"`
	// ServiceName and Tags describe the service to discovery services (the bazaar
	// extension reads them from here).
	ServiceName string   `json:"serviceName,omitempty"`
	Tags        []string `json:"tags,omitempty"`
}

// RequirementsV2 is one entry of a v2 PaymentRequired's accepts list, and the "accepted"
// field of a v2 payload.
type RequirementsV2 struct {
	Scheme            string         `json:"scheme"`
	Network           string         `json:"network"`
	Amount            string         `json:"amount"`
	Asset             string         `json:"asset"`
	PayTo             string         `json:"payTo"`
	MaxTimeoutSeconds int            `json:"maxTimeoutSeconds"`
	Extra             map[string]any `json:"extra,omitempty"`
}

// PaymentRequiredV1 is the JSON body of a v1 402 answer.
type PaymentRequiredV1 struct {
	X402Version int              `json:"x402Version"`
	Error       string           `json:"error"`
	Accepts     []RequirementsV1 `json:"accepts"`
	Payer       string           `json:"payer,omitempty"`
}

// PaymentRequiredV2 is the decoded PAYMENT-REQUIRED header of a v2 402 answer.
type PaymentRequiredV2 struct {
	X402Version int              `json:"x402Version"`
	Error       string           `json:"error,omitempty"`
	Resource    *ResourceInfo    `json:"resource,omitempty"`
	Accepts     []RequirementsV2 `json:"accepts"`
	Extensions  map[string]any   `json:"extensions,omitempty"`
}

// AuthorizationJSON is the wire form of an EIP-3009 TransferWithAuthorization: addresses
// as 0x-hex, integers as decimal strings, the nonce as 0x-hex of 32 bytes.
type AuthorizationJSON struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Value       string `json:"value"`
	ValidAfter  string `json:"validAfter"`
	ValidBefore string `json:"validBefore"`
	Nonce       string `json:"nonce"`
}

// ExactEVMPayload is the scheme payload of an EVM payment: a signature of any length
// (65 bytes for an EOA, longer for ERC-1271 and ERC-6492 wallets) over either the EIP-3009
// authorization or, for Permit2 (exact with extra.assetTransferMethod "permit2", and
// upto), the permit2Authorization. Exactly one of the two is set.
type ExactEVMPayload struct {
	Signature            string                    `json:"signature"`
	Authorization        AuthorizationJSON         `json:"authorization,omitzero"`
	Permit2Authorization *Permit2AuthorizationJSON `json:"permit2Authorization,omitempty"`
}

// PayloadV1 is the decoded X-PAYMENT header.
type PayloadV1 struct {
	X402Version int             `json:"x402Version"`
	Scheme      string          `json:"scheme"`
	Network     string          `json:"network"`
	Payload     ExactEVMPayload `json:"payload"`
}

// PayloadV2 is the decoded PAYMENT-SIGNATURE header.
type PayloadV2 struct {
	X402Version int             `json:"x402Version"`
	Resource    *ResourceInfo   `json:"resource,omitempty"`
	Accepted    RequirementsV2  `json:"accepted"`
	Payload     ExactEVMPayload `json:"payload"`
	Extensions  map[string]any  `json:"extensions,omitempty"`
}

// VerifyRequest is the body of POST /verify. The payload and requirements stay raw until
// the facilitator decodes them in the shape of X402Version (or of the payload's own
// x402Version when the top-level one is absent). VerificationRequirements is the optional
// verification-fee requirement of the verdict service (docs/facilitator.md#api).
type VerifyRequest struct {
	X402Version              int             `json:"x402Version,omitempty"`
	PaymentPayload           json.RawMessage `json:"paymentPayload"`
	PaymentRequirements      json.RawMessage `json:"paymentRequirements"`
	VerificationRequirements json.RawMessage `json:"verificationRequirements,omitempty"`
	VerificationPayment      json.RawMessage `json:"verificationPayment,omitempty"`
}

// SettleRequest is the body of POST /settle.
type SettleRequest struct {
	X402Version         int             `json:"x402Version,omitempty"`
	PaymentPayload      json.RawMessage `json:"paymentPayload"`
	PaymentRequirements json.RawMessage `json:"paymentRequirements"`
}

// VerifyResponse is the answer of POST /verify. A logical failure is HTTP 200 with
// IsValid false. InvalidReason is a v1 enum value for v1 requests and a v2 string for v2.
type VerifyResponse struct {
	IsValid        bool   `json:"isValid"`
	InvalidReason  string `json:"invalidReason,omitempty"`
	InvalidMessage string `json:"invalidMessage,omitempty"`
	Payer          string `json:"payer,omitempty"`
	GuardianStatus string `json:"guardianStatus,omitempty"`
	GuardianReason string `json:"guardianReason,omitempty"`
	// GuardianReasonCode is the verdict's machine-readable reasonCode (e.g.
	// recipient_not_allowed) when the verdict service gave a terminal verdict.
	GuardianReasonCode string `json:"guardianReasonCode,omitempty"`
	// GuardianMode is the mode of the policy that judged the payment: enforce, warn or
	// audit (docs/verdict-api.md#modes).
	GuardianMode string `json:"guardianMode,omitempty"`
	// GuardianWouldFail are the codes of the checks that a warn or audit mode let through
	// an approval: the payment would have been refused in enforce mode.
	GuardianWouldFail []string `json:"guardianWouldFail,omitempty"`
	// GuardianDenials are the failed checks of a verdict that refused the payment, with
	// what the agent can correct (docs/verdict-api.md#observations).
	GuardianDenials []GuardianDenial `json:"guardianDenials,omitempty"`
	FeeTxHash       string           `json:"feeTxHash,omitempty"`
	FeeError        string           `json:"feeError,omitempty"`
}

// GuardianDenial is one failed check of a verdict that refused a payment: the check, its
// code and reason, and its observation: the observed and the expected value and, where one
// makes sense, the suggested correction (docs/verdict-api.md#observations).
type GuardianDenial struct {
	CheckID               string `json:"checkId"`
	Code                  string `json:"code,omitempty"`
	HumanReason           string `json:"humanReason,omitempty"`
	TriggeringPolicyField string `json:"triggeringPolicyField,omitempty"`
	Observed              any    `json:"observed,omitempty"`
	Expected              any    `json:"expected,omitempty"`
	Suggestion            string `json:"suggestion,omitempty"`
}

// SettleResponse is the answer of POST /settle and, base64-encoded, the X-PAYMENT-RESPONSE
// and PAYMENT-RESPONSE headers. Transaction is what every x402 client reads and is always
// present (empty on failure); TxHash repeats it under the spec's name.
type SettleResponse struct {
	Success      bool   `json:"success"`
	ErrorReason  string `json:"errorReason,omitempty"`
	ErrorMessage string `json:"errorMessage,omitempty"`
	Payer        string `json:"payer,omitempty"`
	Transaction  string `json:"transaction"`
	TxHash       string `json:"txHash,omitempty"`
	Network      string `json:"network"`
	Amount       string `json:"amount,omitempty"`
}

// SupportedKind is one (version, scheme, network) a facilitator settles.
type SupportedKind struct {
	X402Version int            `json:"x402Version"`
	Scheme      string         `json:"scheme"`
	Network     string         `json:"network"`
	Extra       map[string]any `json:"extra,omitempty"`
}

// SupportedResponse is the answer of GET /supported: v1 and v2 kinds side by side, and the
// facilitator's signer addresses per CAIP-2 family.
type SupportedResponse struct {
	Kinds      []SupportedKind     `json:"kinds"`
	Extensions []string            `json:"extensions"`
	Signers    map[string][]string `json:"signers"`
}
