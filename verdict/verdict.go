package verdict

import (
	"encoding/json"
	"strconv"
	"time"
)

// Outcome is a verdict's authoritative result (docs/verdict.md#verdict). Only OutcomeApproved allows
// the action to run (docs/verdict.md#fail-closed).
type Outcome string

// The three outcomes. Pending is not terminal: keep polling.
const (
	OutcomePending  Outcome = "pending"
	OutcomeApproved Outcome = "approved"
	OutcomeRejected Outcome = "rejected"
)

// ReasonCode is a verdict's machine-readable reason. It is a string type rather than a
// closed enum so that a code this package does not know yet passes through to callers
// (docs/verdict.md#reason-codes); see the package documentation for when an unknown code is
// accepted.
type ReasonCode string

// Reason codes known to this version (docs/verdict.md#verdict).
const (
	ReasonAllowed         ReasonCode = "allowed"
	ReasonPending         ReasonCode = "pending"
	ReasonDecodeFailure   ReasonCode = "decode_failure"   // cross-cutting
	ReasonDataUnavailable ReasonCode = "data_unavailable" // cross-cutting, and per_tx_cap's second code

	ReasonVenueNotAllowed       ReasonCode = "venue_not_allowed"
	ReasonChainNotAllowed       ReasonCode = "chain_not_allowed"
	ReasonContractOrSelector    ReasonCode = "contract_or_selector_not_allowed"
	ReasonAssetNotInUniverse    ReasonCode = "asset_not_in_universe"
	ReasonRecipientNotAllowed   ReasonCode = "recipient_not_allowed"
	ReasonSideNotAllowed        ReasonCode = "side_not_allowed"
	ReasonNoSlippageGuard       ReasonCode = "no_slippage_guard"
	ReasonNoExecutionPriceBound ReasonCode = "no_execution_price_bound"
	ReasonLeverageCapExceeded   ReasonCode = "leverage_cap_exceeded"
	ReasonSanctionedAddress     ReasonCode = "sanctioned_address"
	ReasonSinkRecipient         ReasonCode = "sink_recipient"
	ReasonPerTxCapExceeded      ReasonCode = "per_tx_cap_exceeded"
	// ReasonSpendWindowExceeded is spend_window's code, an extension (docs/spend-windows.md).
	ReasonSpendWindowExceeded ReasonCode = "spend_window_exceeded"
)

// CheckID names one policy check (docs/verdict.md#checks).
type CheckID string

// The twelve checks. per_tx_cap is "in review" in the spec but part of the enum.
const (
	CheckVenue               CheckID = "venue"
	CheckChain               CheckID = "chain"
	CheckContractSelector    CheckID = "contract_selector"
	CheckAsset               CheckID = "asset"
	CheckRecipient           CheckID = "recipient"
	CheckSide                CheckID = "side"
	CheckSlippageGuard       CheckID = "slippage_guard"
	CheckExecutionPriceBound CheckID = "execution_price_bound"
	CheckLeverage            CheckID = "leverage"
	CheckSanctions           CheckID = "sanctions"
	CheckSinkRecipient       CheckID = "sink_recipient"
	CheckPerTxCap            CheckID = "per_tx_cap"
	// CheckSpendWindow is an extension of schemaVersion 1, present only when the policy
	// configures spend windows (docs/spend-windows.md).
	CheckSpendWindow CheckID = "spend_window"
)

// checkCodes is the docs/verdict.md#checks: the failure codes each check may report. A failed
// check may also carry a cross-cutting code (decode_failure, data_unavailable).
var checkCodes = map[CheckID][]ReasonCode{
	CheckVenue:               {ReasonVenueNotAllowed},
	CheckChain:               {ReasonChainNotAllowed},
	CheckContractSelector:    {ReasonContractOrSelector},
	CheckAsset:               {ReasonAssetNotInUniverse},
	CheckRecipient:           {ReasonRecipientNotAllowed},
	CheckSide:                {ReasonSideNotAllowed},
	CheckSlippageGuard:       {ReasonNoSlippageGuard},
	CheckExecutionPriceBound: {ReasonNoExecutionPriceBound},
	CheckLeverage:            {ReasonLeverageCapExceeded},
	CheckSanctions:           {ReasonSanctionedAddress},
	CheckSinkRecipient:       {ReasonSinkRecipient},
	CheckPerTxCap:            {ReasonPerTxCapExceeded, ReasonDataUnavailable},
	CheckSpendWindow:         {ReasonSpendWindowExceeded, ReasonDataUnavailable},
}

// knownFailureCodes are the codes of the check table (docs/verdict.md#checks) plus the cross-cutting ones.
var knownFailureCodes = func() map[ReasonCode]bool {
	m := map[ReasonCode]bool{ReasonDecodeFailure: true, ReasonDataUnavailable: true}
	for _, cs := range checkCodes {
		for _, c := range cs {
			m[c] = true
		}
	}
	return m
}()

// Known reports whether c is one of the reason codes this version of the package knows.
func (c ReasonCode) Known() bool {
	return c == ReasonAllowed || c == ReasonPending || knownFailureCodes[c]
}

// CrossCutting reports whether c is decode_failure or data_unavailable, the two codes a
// rejected verdict may carry without a matching failed check (docs/verdict.md#consistency-rules 4).
func (c ReasonCode) CrossCutting() bool {
	return c == ReasonDecodeFailure || c == ReasonDataUnavailable
}

// CheckStatus is the result of one check.
type CheckStatus string

// Check statuses (docs/verdict.md#checks).
const (
	CheckPassed     CheckStatus = "passed"      // the check ran and the action satisfied it
	CheckFailed     CheckStatus = "failed"      // the check ran and rejected the action
	CheckNotChecked CheckStatus = "not_checked" // not applicable, or its constraint is not configured
)

// Freshness says how current the data behind a verdict was.
type Freshness string

// Freshness values. A source is fresh or cached; the overall value may also be mixed.
const (
	FreshnessFresh  Freshness = "fresh"
	FreshnessCached Freshness = "cached"
	FreshnessMixed  Freshness = "mixed"
)

// TrustLevel is the service's confidence in its own decoding and data.
type TrustLevel string

// Trust levels.
const (
	TrustHigh   TrustLevel = "high"
	TrustMedium TrustLevel = "medium"
	TrustLow    TrustLevel = "low"
)

// Verdict is a validated verdict object (docs/verdict.md#verdict). A *Verdict from this package has
// passed every rule listed in the package documentation; code that holds one may trust
// that Outcome, ReasonCode and Checks agree. Only Outcome decides: call Approved.
type Verdict struct {
	// SchemaVersion is always 1.
	SchemaVersion int `json:"schemaVersion"`
	// Outcome is pending, approved or rejected.
	Outcome Outcome `json:"outcome"`
	// ReasonCode is allowed (approved), pending (pending) or a violation code (rejected).
	ReasonCode ReasonCode `json:"reasonCode"`
	// HumanReason explains the verdict to a person. It comes from the service: treat it
	// as display text, not as a decision.
	HumanReason string `json:"humanReason"`
	// TriggeringPolicyField is the dotted policy path behind a rejection, or nil.
	TriggeringPolicyField *string `json:"triggeringPolicyField"`
	// Checks holds the per-check results.
	Checks []Check `json:"checks"`
	// Evidence is what the service decoded and observed.
	Evidence Evidence `json:"evidence"`
	// PolicyVersion is the evaluated policy's version; nil while pending or before the
	// policy was resolved.
	PolicyVersion *int64 `json:"policyVersion"`
	// LatencyMs is the evaluation latency, >= 0.
	LatencyMs int64 `json:"latencyMs"`
	// DataFreshness says whether the data used was fresh or cached.
	DataFreshness DataFreshness `json:"dataFreshness"`
	// Trust is the service's confidence.
	Trust Trust `json:"trust"`
	// Redaction lists what the service withheld from the evidence.
	Redaction Redaction `json:"redaction"`
	// USDNotional is the action's notional in USD when priced (>= 0), else nil.
	USDNotional *float64 `json:"usdNotional"`
	// Timestamp is when the verdict was made.
	Timestamp time.Time `json:"timestamp"`
	// Mode is the mode of the policy that judged the verdict (docs/verdict-api.md#modes), an
	// extension of schemaVersion 1; "" when the service does not say, which is enforce.
	Mode Mode `json:"mode,omitempty"`
	// WouldFail lists the checks that failed and that a warn or audit Mode let through, each
	// as it would have been reported (docs/verdict-api.md#modes); an extension, empty in
	// enforce mode.
	WouldFail []Check `json:"wouldFail,omitempty"`
	// Signature is the service's EIP-712 signature of a terminal verdict, an extension of
	// schemaVersion 1 (docs/verdict-signing.md); nil when the verdict is unsigned.
	Signature *Signature `json:"signature,omitempty"`
}

// Approved reports whether the verdict allows the action: true only for a non-nil
// verdict whose outcome is approved (docs/verdict.md#fail-closed).
func (v *Verdict) Approved() bool { return v != nil && v.Outcome == OutcomeApproved }

// Terminal reports whether polling may stop: the outcome is approved or rejected.
func (v *Verdict) Terminal() bool {
	return v != nil && (v.Outcome == OutcomeApproved || v.Outcome == OutcomeRejected)
}

// Check is one item of Verdict.Checks (docs/verdict.md#checks).
type Check struct {
	// CheckID names the check.
	CheckID CheckID `json:"checkId"`
	// Status is passed, failed or not_checked.
	Status CheckStatus `json:"status"`
	// Code is the failure code of a failed check, or nil. Only failed checks carry one.
	Code *ReasonCode `json:"code"`
	// HumanReason explains the result.
	HumanReason string `json:"humanReason"`
	// TriggeringPolicyField is the dotted policy path involved, or nil.
	TriggeringPolicyField *string `json:"triggeringPolicyField"`
}

// Evidence is the verdict's evidence object. Its inner shapes beyond those checked are
// not fixed by the spec, so they are kept as decoded JSON (numbers as json.Number).
type Evidence struct {
	// DecodedAction is the action as the service decoded it; it always has a string
	// "protocol" and a numeric "chainId".
	DecodedAction map[string]any `json:"decodedAction"`
	// Observations holds per-check observations.
	Observations map[string]any `json:"observations"`
	// Sources lists the data sources consulted.
	Sources []any `json:"sources"`
}

// DataFreshness is the verdict's dataFreshness object.
type DataFreshness struct {
	// Overall is fresh, cached or mixed.
	Overall Freshness `json:"overall"`
	// Sources has one entry per source; each has a "status" of fresh or cached.
	Sources []map[string]any `json:"sources"`
}

// Trust is the verdict's trust object.
type Trust struct {
	// Level is high, medium or low.
	Level TrustLevel `json:"level"`
	// Notes qualifies the level, or nil.
	Notes *string `json:"notes"`
}

// Redaction is the verdict's redaction object.
type Redaction struct {
	// Redacted reports whether anything was withheld.
	Redacted bool `json:"redacted"`
	// Fields names what was withheld.
	Fields []string `json:"fields"`
}

// Envelope is the validated approval-status envelope (docs/verdict.md#envelope). Verdict is nil while
// the service has no verdict yet (the field was absent or null).
type Envelope struct {
	// Verdict is the current verdict, nil when none is available yet.
	Verdict *Verdict
}

// Transaction is the validated record returned by POST /transactions (docs/verdict.md#transaction-record).
type Transaction struct {
	// ID is the service's transaction id (may be empty if the service omits it).
	ID string
	// RequestHash identifies the request for GET approval-status; never empty.
	RequestHash string
	// Description is the service's description derived from the prompt.
	Description string
	// Status is the lifecycle state (e.g. PENDING). It is not the verdict (docs/verdict.md#transaction-record).
	Status string
	// TraceID is the client-chosen id sent as metadata.traceId.
	TraceID string
	// Raw is the record as received, for fields this package does not name.
	Raw json.RawMessage
}

// Consistent checks vd against the verdict consistency rules
// (docs/verdict.md#consistency-rules): approved has reasonCode allowed and no failed
// check, pending has reasonCode pending and no policyVersion, rejected has a violation
// code, which (unless it is cross-cutting) a failed check carries. A broken rule is a
// *ValidationError whose Field is relative to the verdict, e.g. "reasonCode". Every
// verdict ParseVerdict or ParseEnvelope returns is consistent.
func (vd *Verdict) Consistent() error {
	if field, problem := vd.inconsistency(); problem != "" {
		return &ValidationError{Op: "verdict", Field: field, Problem: problem}
	}
	return nil
}

// inconsistency applies the four verdict consistency rules, plus the two that follow
// from "inconsistent required verdict fields" (docs/verdict.md#consistency-rules): an
// approved verdict has no failed check, and a pending one has no policyVersion; and the
// rules of the mode extension (modeInconsistency). It
// returns the field, relative to the verdict, and the broken rule; problem is "" when
// vd is consistent.
func (vd *Verdict) inconsistency() (field, problem string) {
	if field, problem := vd.modeInconsistency(); problem != "" {
		return field, problem
	}
	rc := vd.ReasonCode
	switch vd.Outcome {
	case OutcomeApproved:
		if rc != ReasonAllowed { // rule 1
			return "reasonCode", "an approved verdict must have reasonCode allowed"
		}
		for i := range vd.Checks {
			if vd.Checks[i].Status == CheckFailed {
				return "checks[" + strconv.Itoa(i) + "].status", "an approved verdict cannot contain a failed check"
			}
		}
	case OutcomePending:
		if rc != ReasonPending { // rule 2
			return "reasonCode", "a pending verdict must have reasonCode pending"
		}
		if vd.PolicyVersion != nil {
			return "policyVersion", "must be null while the verdict is pending"
		}
	case OutcomeRejected:
		if rc == ReasonAllowed || rc == ReasonPending { // rule 3
			return "reasonCode", "a rejected verdict must have a violation code"
		}
		if rc.CrossCutting() { // rule 4 exception
			return "", ""
		}
		for i := range vd.Checks { // rule 4
			c := &vd.Checks[i]
			if c.Status != CheckFailed {
				continue
			}
			if c.Code != nil && *c.Code == rc {
				return "", ""
			}
			if c.Code == nil {
				for _, code := range checkCodes[c.CheckID] {
					if code == rc {
						return "", ""
					}
				}
			}
		}
		return "reasonCode", "a rejected verdict's reasonCode must match the code of a failed check"
	}
	return "", ""
}
