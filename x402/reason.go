package x402

// Reason is x402gate's internal reason code for a refused or failed payment. One Reason
// maps to a value of the x402@1.2.0 v1 enum (V1), which v1 clients validate strictly, and to
// the @x402/evm v2 string (V2). The internal code is the v2 string.
type Reason string

// Reasons, in the order the facilitator checks them.
const (
	ReasonInvalidVersion        Reason = "invalid_x402_version"
	ReasonInvalidPayload        Reason = "invalid_payload"
	ReasonInvalidRequirements   Reason = "invalid_payment_requirements"
	ReasonInvalidScheme         Reason = "invalid_exact_evm_scheme"
	ReasonInvalidNetwork        Reason = "invalid_network"
	ReasonNetworkMismatch       Reason = "invalid_exact_evm_network_mismatch"
	ReasonAssetMismatch         Reason = "invalid_exact_evm_asset_mismatch"
	ReasonAmountBelowMinimum    Reason = "invalid_exact_evm_required_amount"
	ReasonMissingEIP712Domain   Reason = "invalid_exact_evm_missing_eip712_domain"
	ReasonInvalidSignature      Reason = "invalid_exact_evm_signature"
	ReasonUndeployedWallet      Reason = "invalid_exact_evm_payload_undeployed_smart_wallet"
	ReasonFactoryNotAllowed     Reason = "eip6492_factory_not_allowed"
	ReasonRecipientMismatch     Reason = "invalid_exact_evm_recipient_mismatch"
	ReasonValidBefore           Reason = "invalid_exact_evm_payload_authorization_valid_before"
	ReasonValidAfter            Reason = "invalid_exact_evm_payload_authorization_valid_after"
	ReasonValueMismatch         Reason = "invalid_exact_evm_payload_authorization_value_mismatch"
	ReasonInsufficientFunds     Reason = "invalid_exact_evm_insufficient_balance"
	ReasonNonceUsed             Reason = "invalid_exact_evm_nonce_already_used"
	ReasonVerdictNotApproved    Reason = "verdict_not_approved"
	ReasonApprovalNotFound      Reason = "approval_not_found"
	ReasonApprovalStoreDown     Reason = "approval_store_unavailable"
	ReasonChainUnavailable      Reason = "chain_unavailable"
	ReasonDuplicateSettlement   Reason = "duplicate_settlement"
	ReasonTransactionFailed     Reason = "invalid_exact_evm_transaction_failed"
	ReasonTransferEventMismatch Reason = "invalid_exact_evm_transfer_event_mismatch"
	ReasonSettlementPending     Reason = "settlement_pending"
	ReasonUnexpectedVerify      Reason = "unexpected_verify_error"
	ReasonUnexpectedSettle      Reason = "unexpected_settle_error"

	// Permit2 and upto (@x402/evm 2.27's strings).
	ReasonUnsupportedPayloadType      Reason = "unsupported_payload_type"
	ReasonPermit2InvalidSpender       Reason = "invalid_permit2_spender"
	ReasonPermit2RecipientMismatch    Reason = "invalid_permit2_recipient_mismatch"
	ReasonPermit2TokenMismatch        Reason = "permit2_token_mismatch"
	ReasonPermit2AmountMismatch       Reason = "permit2_amount_mismatch"
	ReasonPermit2DeadlineExpired      Reason = "permit2_deadline_expired"
	ReasonPermit2NotYetValid          Reason = "permit2_not_yet_valid"
	ReasonPermit2InvalidSignature     Reason = "invalid_permit2_signature"
	ReasonPermit2InvalidNonce         Reason = "permit2_invalid_nonce"
	ReasonPermit2InsufficientBalance  Reason = "permit2_insufficient_balance"
	ReasonPermit2AllowanceRequired    Reason = "permit2_allowance_required"
	ReasonUptoFacilitatorMismatch     Reason = "upto_facilitator_mismatch"
	ReasonUptoSettlementExceedsAmount Reason = "invalid_upto_evm_payload_settlement_exceeds_amount"
)

// reasonV1 maps every Reason to a member of the v1 enum (V1Reasons). Where v1 has no
// precise value, the nearest one is chosen, and the v2 string travels in
// invalidMessage/errorMessage.
var reasonV1 = map[Reason]string{
	ReasonInvalidVersion:        "invalid_x402_version",
	ReasonInvalidPayload:        "invalid_payload",
	ReasonInvalidRequirements:   "invalid_payment_requirements",
	ReasonInvalidScheme:         "unsupported_scheme",
	ReasonInvalidNetwork:        "invalid_network",
	ReasonNetworkMismatch:       "invalid_network",
	ReasonAssetMismatch:         "invalid_payment_requirements",
	ReasonAmountBelowMinimum:    "invalid_payment_requirements",
	ReasonMissingEIP712Domain:   "invalid_payment_requirements",
	ReasonInvalidSignature:      "invalid_exact_evm_payload_signature",
	ReasonUndeployedWallet:      "invalid_exact_evm_payload_undeployed_smart_wallet",
	ReasonFactoryNotAllowed:     "invalid_exact_evm_payload_undeployed_smart_wallet",
	ReasonRecipientMismatch:     "invalid_exact_evm_payload_recipient_mismatch",
	ReasonValidBefore:           "invalid_exact_evm_payload_authorization_valid_before",
	ReasonValidAfter:            "invalid_exact_evm_payload_authorization_valid_after",
	ReasonValueMismatch:         "invalid_exact_evm_payload_authorization_value",
	ReasonInsufficientFunds:     "insufficient_funds",
	ReasonNonceUsed:             "invalid_transaction_state",
	ReasonVerdictNotApproved:    "invalid_payment",
	ReasonApprovalNotFound:      "invalid_payment",
	ReasonApprovalStoreDown:     "unexpected_settle_error",
	ReasonChainUnavailable:      "unexpected_verify_error",
	ReasonDuplicateSettlement:   "duplicate_settlement",
	ReasonTransactionFailed:     "invalid_transaction_state",
	ReasonTransferEventMismatch: "invalid_transaction_state",
	ReasonSettlementPending:     "unexpected_settle_error",
	ReasonUnexpectedVerify:      "unexpected_verify_error",
	ReasonUnexpectedSettle:      "unexpected_settle_error",
	// Permit2 and upto are v2 only; these values exist so that every Reason has one.
	ReasonUnsupportedPayloadType:      "invalid_payload",
	ReasonPermit2InvalidSpender:       "invalid_payload",
	ReasonPermit2RecipientMismatch:    "invalid_exact_evm_payload_recipient_mismatch",
	ReasonPermit2TokenMismatch:        "invalid_payment_requirements",
	ReasonPermit2AmountMismatch:       "invalid_exact_evm_payload_authorization_value",
	ReasonPermit2DeadlineExpired:      "invalid_exact_evm_payload_authorization_valid_before",
	ReasonPermit2NotYetValid:          "invalid_exact_evm_payload_authorization_valid_after",
	ReasonPermit2InvalidSignature:     "invalid_exact_evm_payload_signature",
	ReasonPermit2InvalidNonce:         "invalid_transaction_state",
	ReasonPermit2InsufficientBalance:  "insufficient_funds",
	ReasonPermit2AllowanceRequired:    "invalid_payment",
	ReasonUptoFacilitatorMismatch:     "invalid_payment",
	ReasonUptoSettlementExceedsAmount: "invalid_exact_evm_payload_authorization_value",
}

// V1Reasons is the EVM and generic part of the x402@1.2.0 zod enum ErrorReasons: the only
// invalidReason/errorReason values a v1 client accepts.
var V1Reasons = []string{
	"insufficient_funds",
	"invalid_exact_evm_payload_authorization_valid_after",
	"invalid_exact_evm_payload_authorization_valid_before",
	"invalid_exact_evm_payload_authorization_value",
	"invalid_exact_evm_payload_signature",
	"invalid_exact_evm_payload_undeployed_smart_wallet",
	"invalid_exact_evm_payload_recipient_mismatch",
	"invalid_network",
	"invalid_payload",
	"invalid_payment_requirements",
	"invalid_scheme",
	"invalid_payment",
	"payment_expired",
	"unsupported_scheme",
	"invalid_x402_version",
	"invalid_transaction_state",
	"unexpected_settle_error",
	"unexpected_verify_error",
	"duplicate_settlement",
}

// V1 returns the v1 enum value for r. An unknown Reason maps to invalid_payment.
func (r Reason) V1() string {
	if s, ok := reasonV1[r]; ok {
		return s
	}
	return "invalid_payment"
}

// V2 returns the v2 string for r.
func (r Reason) V2() string { return string(r) }

// For returns the wire string of r for a request of the given x402 version.
func (r Reason) For(version int) string {
	if version == Version1 {
		return r.V1()
	}
	return r.V2()
}

// Known reports whether r is one of the Reasons above; a wire string a remote party made
// up is not. Metrics use it to keep their reason label bounded.
func (r Reason) Known() bool {
	_, ok := reasonV1[r]
	return ok
}

// ReasonFromWire maps a wire reason of either version back to a Reason. A v2 string is
// returned as it is; a v1 value maps to the first Reason that produces it.
func ReasonFromWire(s string) Reason {
	if _, ok := reasonV1[Reason(s)]; ok {
		return Reason(s)
	}
	for _, r := range reasonOrder {
		if reasonV1[r] == s {
			return r
		}
	}
	return Reason(s)
}

// reasonOrder fixes which Reason a shared v1 value maps back to.
var reasonOrder = []Reason{
	ReasonInvalidVersion, ReasonInvalidPayload, ReasonInvalidRequirements, ReasonInvalidScheme,
	ReasonInvalidNetwork, ReasonInvalidSignature, ReasonUndeployedWallet, ReasonRecipientMismatch,
	ReasonValidBefore, ReasonValidAfter, ReasonValueMismatch, ReasonInsufficientFunds,
	ReasonNonceUsed, ReasonVerdictNotApproved, ReasonDuplicateSettlement, ReasonUnexpectedVerify,
	ReasonUnexpectedSettle,
}
